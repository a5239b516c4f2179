// Demo page helper (not part of the tag): logs window.edgeTag events with the time since the
// page started loading, marks each slot with when it was filled and when its ad became
// viewable, and adds a slot after load the way a single-page app would. DOM APIs only, so it
// runs under the page's CSP (the labels are drawn by demo.css from data attributes).
(() => {
  const tag = (window.edgeTag = window.edgeTag || new EventTarget());
  const seconds = () => (performance.now() / 1000).toFixed(1) + " s";
  const slotOf = (id) =>
    id ? document.querySelector(`[data-ad-slot="${CSS.escape(String(id))}"]`) : null;

  const log = (event) => {
    const list = document.getElementById("tag-events");
    if (!list) return;
    const d = event.detail || {};
    const item = document.createElement("li");
    item.className = "events__item events__item--" + event.type;
    const when = document.createElement("span");
    when.className = "events__time";
    when.textContent = seconds();
    const what = [event.type, d.slot_id, d.ad_id, d.reason].filter(Boolean).join(" ");
    item.append(when, " " + what);
    list.append(item);
    list.scrollTop = list.scrollHeight; // the newest event stays in sight
  };

  const mark = (event) => {
    const d = event.detail || {};
    const slot = slotOf(d.slot_id);
    if (!slot) return;
    if (event.type === "filled") slot.dataset.demoFilledAt = seconds();
    if (event.type === "viewable") {
      const share = Math.round((d.visible_ratio || 0) * 100);
      slot.dataset.demoViewableAt = `${seconds()} (${share}% in view)`;
    }
  };

  for (const type of ["filled", "empty", "viewable", "error"]) {
    tag.addEventListener(type, log);
    tag.addEventListener(type, mark);
  }

  let added = 0;
  document.addEventListener("click", (event) => {
    if (!(event.target instanceof Element) || event.target.id !== "add-slot") return;
    added += 1;
    const post = document.createElement("article");
    post.className = "post";
    post.dataset.ugcPostId = "demo-late-" + added;
    const text = document.createElement("p");
    text.className = "post__text";
    text.textContent =
      "Just bought a new espresso machine and I am hooked on making lattes at home. " +
      "Which coffee beans do you like for espresso?";
    const slot = document.createElement("div");
    slot.className = "slot slot--post";
    slot.dataset.adSlot = "demo-late-" + added + "-ad";
    post.append(text, slot);
    document.getElementById("late-posts").append(post);
  });
})();
