// Start-up: one instance per page, the publisher from the script's data-publisher, then
// the slots present now and (MutationObserver) those a single-page app adds later.
const PUBLISHER = D.currentScript?.dataset.publisher || DEFAULT_PUBLISHER;

function start() {
  fill(newSlots(D), true);
  new MutationObserver(
    guard((records) => {
      const added = records.flatMap((r) => [...r.addedNodes].flatMap((n) => (n.nodeType === 1 ? newSlots(n) : [])));
      if (added.length) fill(added, false);
    })
  ).observe(D.documentElement, { childList: true, subtree: true });
}

guard(() => {
  if (hub.version) return; // a second copy of the tag on the page
  hub.version = VERSION;
  W.edgeTag = hub;
  if (!PUBLISHER) return fail("no data-publisher");
  W.addEventListener("pagehide", guard(flush));
  D.addEventListener("visibilitychange", guard(() => D.hidden && flush()));
  if (D.readyState === "loading") D.addEventListener("DOMContentLoaded", guard(start));
  else start();
})();
