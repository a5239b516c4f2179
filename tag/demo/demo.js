// Demo page helper (not part of the tag): shows window.edgeTag events and adds a slot after
// load the way a single-page app would. DOM APIs only, so it runs under the page's CSP.
(() => {
  const tag = (window.edgeTag = window.edgeTag || new EventTarget());
  const show = (event) => {
    const list = document.getElementById("tag-events");
    if (!list) return;
    const item = document.createElement("li");
    const d = event.detail || {};
    item.textContent = [event.type, d.slot_id, d.ad_id, d.reason].filter(Boolean).join(" ");
    list.append(item);
  };
  for (const type of ["filled", "empty", "viewable", "error"]) tag.addEventListener(type, show);

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
