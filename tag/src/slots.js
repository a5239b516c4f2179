// Slot discovery and filling. Page-level slots present at load go to /dea/url/keywords with
// the page's text; UGC slots (inside [data-ugc-post-id]), slots added later and refills go
// to /dea/url/placements, a UGC slot with its post's id and text.
const SLOT = "[data-ad-slot]";
// docs/dea-api.md limits: 20 slots or placements per request (batches); a page's text is cut
// at 20,000 characters, a post's at 10,000 (literals below: a name costs the tag bytes).
// Every slot seen -> its current filling ({slot, id, post, key, timer}); a refill or
// destroy() ends it, so a late answer or timer of an earlier one touches nothing.
const fills = new WeakMap();
// Post or slot id -> when the edge's no-match window ends (retry_after_seconds): no request
// for it before then.
const notBefore = {};
// Slot id -> the element that has it. An id is 1 to 128 characters and names one element on
// the page (docs/tag.md); the edge refuses a whole request over one bad or repeated id, so
// a slot that breaks the rule fails alone, here, and is never sent. An id is free again
// once its element has left the page.
const owners = {};

const newSlots = () => [...D.querySelectorAll(SLOT)].filter((s) => !fills.has(s) && fills.set(s));

// The element's text without ad slots and non-content elements, at most `max` characters.
function textOf(root, max) {
  const skip = "script,style,noscript,template," + SLOT;
  // whatToShow 5: elements and text; the filter answers 1 accept, 2 reject the subtree,
  // 3 skip the element itself but visit its children.
  const walker = D.createTreeWalker(root, 5, {
    acceptNode: (n) => n.nodeType === 3 ? 1 : n.matches(skip) ? 2 : 3
  });
  let text = "";
  while (text.length < max && walker.nextNode()) text += walker.currentNode.data + " ";
  return text.replace(/\s+/g, " ").trim().slice(0, max);
}

// Limits of docs/dea-api.md: a page URL of at most 2048 characters, a title of 500.
const common = () => ({ publisher_id: PUBLISHER, v: VERSION, page_url: location.href.split("#")[0].slice(0, 2048) });

const end = (slot, next) => {
  clearTimeout(fills.get(slot)?.timer);
  fills.set(slot, next);
};

// Fill the slot again once `ms` have passed and it is in view again (the viewability rule:
// on screen, the page visible and focused), as GPT's refresh does: a new ad, a new token and
// a new impression. A refill or destroy() meanwhile makes it do nothing.
function renew(it, ms) {
  it.timer = setTimeout(
    guard(() => watchViewable(it.slot, () => fills.get(it.slot) === it && fill([it.slot]))),
    ms
  );
}

function fill(slots, atLoad) {
  const main = D.querySelector("main") || D.body;
  const keyed = [];
  const explicit = [];
  for (const slot of slots) {
    const id = slot.dataset.adSlot;
    const post = slot.closest("[data-ugc-post-id]");
    const it = { slot, id, post, key: post?.dataset.ugcPostId || id };
    end(slot, it);
    slot.dataset.edgeState = "loading";
    const wait = notBefore[it.key] - now();
    dbg("slot", id, slot, wait > 0 ? "backoff: waits " + wait + " ms" : "");
    // The id's element is this one unless another one on the page has it already.
    if (!id || id.length > 128 || (owners[id]?.isConnected ? owners[id] : (owners[id] = slot)) !== slot) report(it, "error", { reason: "invalid_slot_id" });
    else if (wait > 0) renew(it, wait);
    else (atLoad && !post ? keyed : explicit).push(it);
  }
  batches(keyed, (batch) =>
    request("url/keywords", { ...common(), title: D.title.slice(0, 500), text: textOf(main, 20000), slots: batch.map((it) => it.id) }, batch)
  );
  batches(explicit, (batch) =>
    request("url/placements", {
      ...common(),
      placements: batch.map(({ id, post }) => ({
        slot_id: id,
        text: textOf(post || main, 10000),
        ...post && { post_id: post.dataset.ugcPostId }
      }))
    }, batch)
  );
}

function batches(list, send) {
  for (let i = 0; i < list.length; i += 20) send(list.slice(i, i + 20));
}

// The page's match requests go one after another, each once the one before has its answer:
// a page with many slots holds one of the edge's tag-lane matches at a time, not all of them.
let queue = Promise.resolve();

// Placements come back in request order (slots or placements). A slot refilled or destroyed
// meanwhile ignores its answer. A busy edge is asked twice more (transport.js). A failed
// request, like any answer (place), takes the slot's previous ad away before it is reported.
function request(path, body, batch) {
  queue = queue.then(() => ask(path, body, 2)).then(
    guard((r) => {
      batch.forEach((it, i) => fills.get(it.slot) === it && guard(place)(it, r.placements?.[i])); // one bad slot spoils no other
    }),
    guard((err) =>
      batch.forEach((it) => {
        it.slot.replaceChildren();
        report(it, "error", { reason: "request_failed", message: "" + err, ...err });
      })
    )
  );
}

// The slot's data-edge-state (for publishers' CSS) and the window.edgeTag event (for QA:
// `edgeTag.addEventListener("viewable", fn)`; a page that sets `window.edgeTag = new
// EventTarget()` before the tag loads hears every event).
function report({ slot, id }, type, detail) {
  slot.dataset.edgeState = type;
  detail = { slot_id: id, ...detail };
  dbg(type, detail);
  hub.dispatchEvent(new CustomEvent(type, { detail }));
}

function place(it, placement) {
  const ad = placement?.ad;
  const retry = placement?.retry_after_seconds * 1000;
  if (retry > 0) {
    notBefore[it.key] = now() + retry;
    renew(it, retry);
  }
  // Whatever the answer, the slot's previous ad goes before it is reported. Left on screen
  // under "empty" it was still measured, and billed, on a page that gets no ad (QA: a
  // single-page app's refresh(el) on a route to an unsafe page; a refill after its
  // ttl_seconds likewise). Its refill timer ended with its filling (end); the rest stops
  // once it is off the page (below).
  it.slot.replaceChildren();
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
    reason = "render_error";
    message = "" + err;
  }
  if (!box) {
    // Reported to the edge (failure counters) and to QA listeners.
    beacon("url/placements/failures", { ...common(), slot_id: it.id, reason, message, ...isText(token) && { impression_token: token } });
    return report(it, "error", { ad_id: ad.ad_id, reason, message });
  }
  report(it, "filled", { ad_id: ad.ad_id, surface });
  const send = (path, body) => beacon(path, { impression_token: token, v: VERSION, ...body });
  // The ad's third-party trackers of one tracker_type, fired as Prebid's triggerPixel does
  // (an image request): "impression" and "viewable" ones when the ad is viewable, "click"
  // ones on a click. Firing a click tracker on view would count a click for every view.
  const pixels = (type) => {
    for (const px of ad.pixel_trackers || []) if (px?.tracker_type === type && isText(px.url)) new Image().src = px.url;
  };
  // A click, a middle click or keyboard activation (Enter fires click) sends one beacon and
  // fires the click trackers; the browser follows the link itself. A repeat reuses the click
  // id and counts nothing; its trackers are not requested again either, and no state here
  // says so: the browser answers an image URL the page has already loaded from its list of
  // available images (HTML standard, "update the image data"; HTTP caching plays no part).
  // Only a person's click counts: one made by script (el.click(), a dispatched MouseEvent, a
  // "click anywhere" widget or a session replay) is not trusted and sends nothing. (& rather
  // than && keeps the tag within its size budget: both sides are cheap and side-effect free.)
  box.onclick = box.onauxclick = guard((e) => {
    if (e.isTrusted & e.button < 2) {
      send(surface + "/click", { click_id });
      pixels("click");
    }
  });
  // An ad taken off the page (the slot's next answer, destroy(), the page removing it)
  // counts nothing more: a viewability second or hover dwell under way ends in nothing.
  // The observer reports it out of view only at the next rendering, maybe after a timer due
  // first; checkVisibility() says false at once, but Safari before 17.4 lacks it.
  // Clicks need no check: nobody can click an element that is not on the page.
  watchViewable(box, (view) => {
    if (!box.isConnected) return;
    const impression_id = uid();
    send(surface + "/impression", { impression_id, ...view });
    pixels("impression");
    pixels("viewable");
    report(it, "viewable", { ad_id: ad.ad_id, impression_id, ...view });
    // Replaced when its ttl_seconds have run out since the reader saw it (an ad that sat
    // below the fold past them was swapped the moment it was counted: QA), never sooner
    // than 30 s (refreshing faster only inflates counts; Google's GPT asks for 30 s too),
    // and then only once the slot is in view again (renew).
    ad.ttl_seconds > 0 && renew(it, Math.max(ad.ttl_seconds * 1000, 3e4));
  });
  // One hover signal per rendering, once the pointer has stayed HOVER_MS on the ad.
  let timer;
  box.onpointerenter = guard(() => {
    const since = now();
    timer = setTimeout(
      guard(() => {
        if (!box.isConnected) return;
        box.onpointerenter = null;
        send("url/hover", { hover_ms: Math.round(now() - since) });
      }),
      HOVER_MS
    );
  });
  box.onpointerleave = () => clearTimeout(timer);
}
