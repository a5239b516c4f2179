// Shared helpers. Every entry point the browser calls (observers, timers, listeners, promise
// handlers) is wrapped in guard() so that nothing here can throw into the publisher's page.
const W = window;
const D = document;
const hub = W.edgeTag instanceof EventTarget ? W.edgeTag : new EventTarget();
const now = () => performance.now();
// Truthy (the trimmed text) for a string with a character other than space, else falsy.
const isText = (x) => typeof x == "string" && x.trim();

// An exception here is a bug of the tag, never the page's problem: swallowed, and logged by
// the debug build.
const guard = (fn) => (...args) => {
  try {
    return fn(...args);
  } catch (err) {
    dbg("exception", err);
  }
};

// The page's clock in milliseconds (base 36, 8 digits until 2059), then 128 random bits as
// four decimal numbers, joined by "-" (the edge takes 8 to 64 of A-Z a-z 0-9 _ -;
// crypto.randomUUID would need a secure context). Ids made later sort after earlier ones, so
// the edge's index of them grows at one end instead of taking each id on a random page.
const uid = () =>
  [Date.now().toString(36), crypto.getRandomValues(new Uint32Array(4)).join("-")].join("-");
