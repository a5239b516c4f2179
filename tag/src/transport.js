// Talking to the edge. Fill requests and beacons are CORS fetches of JSON (preflighted
// cross-origin); beacons add keepalive so they outlive the page. A beacon whose fetch is
// missing or throws (keepalive quota), fails at the network level (a proxy that drops the
// preflight) or is answered 5xx/429 is queued and sent again with navigator.sendBeacon as
// text/plain (no preflight) after RESEND_MS, or at once on pagehide. Its impression id
// makes a resent impression count once.
const RESEND_MS = 2000;
const pending = [];
let resendTimer = 0;

function post(path, body, keepalive) {
  return fetch(EDGE + path, {
    method: "POST",
    keepalive,
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body)
  });
}

function ask(path, body) {
  return post(path, body, false).then((r) => {
    if (!r.ok) throw path + " " + r.status;
    return r.json();
  });
}

function beacon(path, body) {
  const later = guard(() => {
    pending.push([path, body]);
    resendTimer ||= setTimeout(guard(flush), RESEND_MS);
  });
  try {
    post(path, body, true).then(
      guard((r) => (r.status > 499 || r.status === 429 ? later() : r.ok || fail(path + " " + r.status))),
      later
    );
  } catch (_) {
    later();
  }
}

function flush() {
  clearTimeout(resendTimer);
  resendTimer = 0;
  for (const [path, body] of pending.splice(0)) {
    navigator.sendBeacon?.(EDGE + path, JSON.stringify(body));
  }
}
