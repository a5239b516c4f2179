// Start-up: one instance per page, the publisher from the script's data-publisher, then
// the slots present now and (MutationObserver) those a single-page app adds later.
// data-debug on the script, or ?edge_debug=1 on the page, runs the debug build instead
// (same origin as this script, loaded as a module: no Trusted Types sink, the nonce carries);
// hub.publisher hands it the publisher and tells it not to load itself again.
const SCRIPT = D.currentScript;
const PUBLISHER = SCRIPT?.dataset.publisher || hub.publisher || DEFAULT_PUBLISHER;

// After a change to the page, one querySelectorAll finds the slots it has not seen (native,
// a fraction of a millisecond on a large page), rather than walking every added node.
function start() {
  fill(newSlots(), true);
  new MutationObserver(guard(() => fill(newSlots()))).observe(D, { childList: true, subtree: true });
}

guard(() => {
  if (hub.version) return; // a second copy of the tag on the page
  if (!hub.publisher && (SCRIPT?.dataset.debug != null || /edge_debug=1/.test(location.search))) {
    hub.publisher = PUBLISHER;
    return import(EDGE + "/dea/tag.debug.js");
  }
  hub.version = VERSION;
  W.edgeTag = hub;
  // The page's controls for a slot (single-page apps): refresh(el) fills it again now, a new
  // ad and a new impression (after a no-match window, not before); destroy(el) empties it
  // and stops its refresh and measurement.
  hub.refresh = guard((el) => fill([el]));
  hub.destroy = guard((el) => {
    end(el, 0);
    el.replaceChildren();
    delete el.dataset.edgeState;
  });
  W.addEventListener("pagehide", guard(flush));
  D.addEventListener("visibilitychange", guard(() => D.hidden && flush()));
  D.readyState === "loading" ? D.addEventListener("DOMContentLoaded", guard(start)) : start();
})();
