// Slot discovery and filling. Page-level slots present at load go to /dea/url/keywords with
// the page's text; UGC slots (inside [data-ugc-post-id]) and slots added later go to
// /dea/url/placements, a UGC slot with its post's id and text.
const SLOT = "[data-ad-slot]";
// docs/dea-api.md limits: slots or placements per request, characters of page / post text.
const MAX_SLOTS = 20;
const PAGE_TEXT_MAX = 20000;
const POST_TEXT_MAX = 10000;
const seen = new WeakSet();

function newSlots(root) {
  const found = root.matches?.(SLOT) ? [root] : [];
  found.push(...root.querySelectorAll(SLOT));
  return found.filter((s) => !seen.has(s) && seen.add(s));
}

// The element's text without ad slots and non-content elements, at most `max` characters.
function textOf(root, max) {
  const skip = "script,style,noscript,template," + SLOT;
  // whatToShow 5: elements and text; the filter answers 1 accept, 2 reject the subtree,
  // 3 skip the element itself but visit its children.
  const walker = D.createTreeWalker(root, 5, {
    acceptNode: (n) => (n.nodeType === 3 ? 1 : n.matches(skip) ? 2 : 3)
  });
  let text = "";
  while (text.length < max && walker.nextNode()) text += walker.currentNode.data + " ";
  return text.replace(/\s+/g, " ").trim().slice(0, max);
}

// Limits of docs/dea-api.md: a page URL of at most 2048 characters, a title of 500.
const common = () => ({ publisher_id: PUBLISHER, v: VERSION, page_url: location.href.split("#")[0].slice(0, 2048) });

function fill(slots, atLoad) {
  const main = D.querySelector("main") || D.body;
  const keyed = new Map();
  const explicit = [];
  for (const slot of slots) {
    slot.setAttribute("data-edge-state", "loading");
    const it = { slot, id: slot.dataset.adSlot, post: slot.closest("[data-ugc-post-id]") };
    if (atLoad && !it.post && !keyed.has(it.id)) keyed.set(it.id, it);
    else explicit.push(it);
  }
  batches([...keyed.values()], (batch) => {
    const slots = batch.map((it) => it.id);
    const body = { ...common(), title: D.title.slice(0, 500), text: textOf(main, PAGE_TEXT_MAX), slots };
    request("/dea/url/keywords", body, batch, (p) => slots.map((id) => p.find((x) => x.slot_id === id)));
  });
  batches(explicit, (batch) => {
    const placements = batch.map(({ id, post }) => ({
      slot_id: id,
      text: textOf(post || main, POST_TEXT_MAX),
      ...(post && { post_id: post.dataset.ugcPostId })
    }));
    request("/dea/url/placements", { ...common(), placements }, batch, (p) => p);
  });
}

function batches(list, send) {
  for (let i = 0; i < list.length; i += MAX_SLOTS) send(list.slice(i, i + MAX_SLOTS));
}

// Placements come back in request order (keywords: picked by slot id).
function request(path, body, batch, pick) {
  ask(path, body).then(
    guard((r) => {
      const placements = pick(r.placements || []);
      batch.forEach((it, i) => guard(place)(it, placements[i])); // one bad slot spoils no other
    }),
    guard((err) => batch.forEach((it) => report(it, "error", { reason: "request_failed", message: "" + err })))
  );
}

// The slot's data-edge-state (for publishers' CSS) and the window.edgeTag event (for QA).
function report({ slot, id }, type, detail) {
  slot.setAttribute("data-edge-state", type);
  emit(type, { slot_id: id, ...detail });
}

function place(it, placement) {
  const ad = placement?.ad;
  if (!ad) return report(it, "empty", { reason: placement?.reason || "none" });
  const surface = it.post ? "ugc" : "url";
  const token = ad.impression_token;
  let reason = "creative_error";
  let message = creativeProblem(ad);
  const click_id = uid();
  let box;
  try {
    if (!message) box = render(it.slot, ad, click_id);
  } catch (err) {
    it.slot.replaceChildren();
    reason = "render_error";
    message = "" + err;
  }
  if (!box) {
    // Reported to the edge (failure counters) and to QA listeners.
    beacon("/dea/url/placements/failures", { ...common(), slot_id: it.id, reason, message, ...(isText(token) && { impression_token: token }) });
    return report(it, "error", { ad_id: ad.ad_id, reason, message });
  }
  report(it, "filled", { ad_id: ad.ad_id, surface });
  // A click, a middle click or keyboard activation (Enter fires click) sends one beacon; the
  // browser follows the link itself. A repeat reuses the click id and counts nothing.
  box.onclick = box.onauxclick = guard(
    (e) => e.button < 2 && beacon("/dea/" + surface + "/click", { impression_token: token, click_id, v: VERSION })
  );
  watchViewable(box, (view) => {
    const impression_id = uid();
    beacon("/dea/" + surface + "/impression", { impression_token: token, impression_id, v: VERSION, ...view });
    firePixels(ad);
    report(it, "viewable", { ad_id: ad.ad_id, impression_id, ...view });
  });
  // One hover signal per rendering, once the pointer has stayed HOVER_MS on the ad.
  let timer = 0;
  box.onpointerenter = guard(() => {
    const since = now();
    timer = setTimeout(
      guard(() => {
        box.onpointerenter = null;
        beacon("/dea/url/hover", { impression_token: token, hover_ms: Math.round(now() - since), v: VERSION });
      }),
      HOVER_MS
    );
  });
  box.onpointerleave = () => clearTimeout(timer);
}
