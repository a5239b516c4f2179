// ESLint for the browser tag and the demo page's script (`make lint`).
// The tag's src/*.js files share one function scope once built, so `make lint` feeds ESLint
// the joined source (tag.builder.lint_source) on stdin as "tag.js": a name used in one file
// and declared in another is then checked like any other.
import js from "@eslint/js";
import globals from "globals";

export default [
  js.configs.recommended,
  {
    languageOptions: {
      ecmaVersion: 2022,
      sourceType: "script",
      globals: { ...globals.browser },
    },
    rules: {
      "no-var": "error",
      "prefer-const": "error",
      eqeqeq: ["error", "smart"],
      "no-implicit-globals": "error",
      "no-unused-vars": ["error", { caughtErrors: "none" }],
    },
  },
];
