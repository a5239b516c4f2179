// Shared helpers. Every entry point the browser calls (observers, timers, listeners, promise
// handlers) is wrapped in guard() so that nothing here can throw into the publisher's page.
const W = window;
const D = document;
const hub = W.edgeTag instanceof EventTarget ? W.edgeTag : new EventTarget();
const now = () => performance.now();
const isText = (x) => typeof x === "string" && x.trim() !== "";

// QA hook: `edgeTag.addEventListener("viewable", fn)`. A page that sets
// `window.edgeTag = new EventTarget()` before the tag loads hears every event.
function emit(type, detail) {
  hub.dispatchEvent(new CustomEvent(type, { detail }));
}

function fail(err) {
  try {
    emit("error", { message: "" + (err?.message || err) });
  } catch (_) {
    // Nothing left to tell; stay silent rather than break the page.
  }
}

function guard(fn) {
  return (...args) => {
    try {
      return fn(...args);
    } catch (err) {
      fail(err);
    }
  };
}

// A random RFC 4122 version 4 id (crypto.randomUUID needs a secure context).
const uid = () =>
  "10000000-1000-4000-8000-100000000000".replace(/[018]/g, (c) =>
    (c ^ (crypto.getRandomValues(new Uint8Array(1))[0] & (15 >> c / 4))).toString(16)
  );
