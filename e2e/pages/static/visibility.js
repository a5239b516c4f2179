// Stubs the Page Visibility API the way web-vitals' test pages do, so a test can load the
// page hidden and show it later: window.__setVisibility("visible").
(() => {
  let state = "hidden";
  Object.defineProperty(document, "visibilityState", { get: () => state, configurable: true });
  Object.defineProperty(document, "hidden", { get: () => state === "hidden", configurable: true });
  window.__setVisibility = (next) => {
    state = next;
    // As browsers fire it: at the document, bubbling to the window.
    document.dispatchEvent(new Event("visibilitychange", { bubbles: true }));
  };
})();
