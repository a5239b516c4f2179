// Talking to the edge. Fill requests and beacons are CORS fetches of JSON (preflighted
// cross-origin); beacons add keepalive so they outlive the page. A beacon whose fetch is
// missing or throws (keepalive quota), fails at the network level (a proxy that drops the
// preflight) or is answered 5xx/429 is queued and sent again with navigator.sendBeacon as
// text/plain (no preflight) after 2 s, or at once on pagehide. Its impression id
// makes a resent impression count once.
const pending = [];
let resendTimer; // undefined when none is due

// Paths are the edge's /dea/ routes without that prefix ("url/keywords"), written once here.
function post(path, body, keepalive) {
  return fetch(EDGE + "/dea/" + path, {
    method: "POST",
    keepalive,
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body)
  });
}

// A match call: the answer, or a rejection with the edge's error ({code, message, field}),
// also for an origin not registered for the publisher (the edge lets the tag read that).
// A TypeError means no answer at all (the page's CSP blocked the request, or the network).
// A refusal that says when to come back (Retry-After: the edge sends it with 503, 429 and
// 502; the tag lane's 503 overloaded says 1 s) is asked again after it when that is under
// 10 s, `tries` more times at most; then its error is the answer.
function ask(path, body, tries) {
  dbg("request", path, body);
  return post(path, body).then((r) => {
    const wait = r.headers.get("Retry-After") * 1000;
    if (wait > 0 && wait < 1e4 && !r.ok && tries--) {
      dbg("retry", path, r.status, wait);
      return new Promise((ok) => setTimeout(ok, wait)).then(() => ask(path, body, tries));
    }
    return r.json().then((b) => {
      dbg("answer", path, r.status, b);
      if (r.ok) return b;
      throw b.error;
    });
  });
}

function beacon(path, body) {
  dbg("beacon", path, body);
  const later = guard(() => {
    pending.push([path, body]);
    resendTimer ||= setTimeout(guard(flush), 2000);
  });
  try {
    post(path, body, true).then(
      guard((r) => {
        dbg("beacon answer", path, r.status);
        if (r.status > 499 || r.status === 429) later();
      }),
      later
    );
  } catch (_) {
    later();
  }
}

function flush() {
  resendTimer = clearTimeout(resendTimer);
  for (const [path, body] of pending.splice(0)) {
    dbg("beacon resent", path, body);
    navigator.sendBeacon?.(EDGE + "/dea/" + path, JSON.stringify(body));
  }
}
