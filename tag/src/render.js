// Rendering with DOM APIs only: createElement and textContent, never innerHTML of ad text,
// no inline style (publishers style the classes), so it runs under a strict CSP with
// Trusted Types enforced. click_through_url goes into href exactly as given, except that a
// {click_id} the advertiser put there becomes this rendering's click id.

// The field that keeps an ad from being shown, or "" when it can be.
function creativeProblem(ad) {
  for (const f of ["ad_id", "title", "cta", "advertiser_name", "impression_token"]) if (!isText(ad[f])) return f;
  return /^https?:\/\/[^/]/i.test(ad.click_through_url) ? "" : "click_through_url";
}

function part(tag, name, text) {
  const e = D.createElement(tag);
  e.className = name;
  e.textContent = text; // no text: undefined, which this nullable attribute takes as ""
  return e;
}

function render(slot, ad, clickId) {
  const box = part("div", "edge-ad");
  box.dataset.adId = ad.ad_id;
  const link = part("a", "edge-ad__link");
  link.href = ad.click_through_url.replaceAll("{click_id}", clickId);
  link.target = "_blank";
  link.rel = "sponsored noopener";
  link.append(part("span", "edge-ad__label", "Sponsored"), part("span", "edge-ad__title", ad.title));
  if (isText(ad.description)) link.append(part("span", "edge-ad__description", ad.description));
  link.append(part("span", "edge-ad__advertiser", ad.advertiser_name), part("span", "edge-ad__cta", ad.cta));
  box.append(link);
  slot.replaceChildren(box);
  return box;
}
