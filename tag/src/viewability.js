// MRC viewable impression (the rule Prebid's bidViewabilityIO.js implements): at least
// VIEW_RATIO of the ad's pixels in view for VIEW_MS continuous milliseconds, or
// LARGE_VIEW_RATIO for ads of LARGE_AREA px² or more, on a visible, focused page. In a
// frame (W is not its own parent) only visibility counts: the frame's document.hasFocus()
// is false unless the reader focused that very frame, and the top page's focus cannot be
// read from a frame of another origin (QA: an ad in view in a frame never counted). A frame's
// document is hidden with its page, so the background-tab rule holds there too.
// IntersectionObserver starts and cancels one timer per ad; leaving the view, the page
// being hidden or losing focus cancels it, so the second has to be continuous
// (web-vitals' getVisibilityWatcher.ts watches visibilitychange the same way).
// Geometry is not sight: an ad under visibility:hidden or opacity:0 (its own or an
// ancestor's) is on screen for the observer but seen by nobody, and an ad without pixels
// (zero width or height) is seen by nobody either, though the observer gives a zero-area
// element that touches the viewport intersectionRatio 1 (QA: a 0x0 ad was billed). Its size
// and checkVisibility() are asked when the second starts and when it ends; a second that
// was not visible at both ends does not count and the next one starts (no event tells when
// CSS shows the ad again, nor when an ad in view gets its size: fully in view, the observer
// said 1 before and says 1 after). Where the browser lacks checkVisibility (Safari before
// 17.4), geometry alone decides, as before.
const watched = new Map(); // element -> its check(entry?)
let observer;

// Calls done({visible_ratio, visible_ms}) once, when the element has been viewable. An
// element taken off the page (a refill, destroy()) reports no intersection: its timer stops.
function watchViewable(el, done) {
  if (!observer) {
    observer = new IntersectionObserver(
      guard((entries) => entries.forEach((e) => watched.get(e.target)?.(e))),
      { threshold: [0, LARGE_VIEW_RATIO, VIEW_RATIO, 1] }
    );
    // visibilitychange bubbles from the document to the window.
    for (const type of ["visibilitychange", "focus", "blur"]) W.addEventListener(type, guard(() => watched.forEach((check) => check())));
  }
  let ratio = 0;
  let need = VIEW_RATIO;
  let timer;
  let since;
  let seen;
  const shown = () =>
    el.offsetWidth * el.offsetHeight && el.checkVisibility?.({ opacityProperty: true, visibilityProperty: true }) !== false;
  const check = (entry) => {
    if (entry) {
      const box = entry.boundingClientRect;
      ratio = entry.intersectionRatio; // 0 out of view (1 for a zero-area element in it: shown())
      need = box.width * box.height >= LARGE_AREA ? LARGE_VIEW_RATIO : VIEW_RATIO;
    }
    if (ratio < need || D.hidden || (!D.hasFocus() && W === parent)) {
      timer = clearTimeout(timer); // undefined: no timer running
    } else if (!timer) {
      since = now();
      seen = shown();
      timer = setTimeout(viewed, VIEW_MS);
    }
  };
  const viewed = guard(() => {
    timer = 0;
    if (!seen || !shown()) return check(); // not seen for the whole second: the next one
    watched.delete(el);
    observer.unobserve(el);
    done({ visible_ratio: ratio, visible_ms: Math.round(now() - since) });
  });
  watched.set(el, check);
  observer.observe(el);
}
