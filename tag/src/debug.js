// The debug build only (/dea/tag.debug.js): every decision of the tag on the console. The
// normal build has neither this file nor the dbg(...) lines (tag/builder.py strips them).
function dbg(what, ...details) {
  console.info("[edge-tag] " + what, ...details);
}
