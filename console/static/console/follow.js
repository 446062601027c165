// Follows a region of the page while what it shows can still move: an element with data-live (the URL of a small
// JSON status: {version, moving}), data-live-version (the version the page shows) and data-live-every (how often to
// ask, in ms). When the status's version differs, the region's content is swapped for the page's as it is now, with
// the page's messages (no reload: the operator's place stays); once nothing moves any more, it stops asking.
(function () {
  "use strict";
  const SLOWEST_MS = 5000;

  // What the operator has put in the region's fields: while it differs from what the page came with, the region
  // stays as it is (a swap would throw away a note being typed or a filter being chosen).
  function fields(region) {
    const values = Array.from(region.querySelectorAll("input, textarea, select"), (field) =>
      field.type === "checkbox" || field.type === "radio" ? field.checked : field.value,
    );
    return JSON.stringify(values);
  }

  async function swap(region) {
    const answer = await fetch(window.location.href, { headers: { Accept: "text/html" } });
    const page = new DOMParser().parseFromString(await answer.text(), "text/html");
    const fresh = page.getElementById(region.id);
    if (!fresh) return;
    const focused = region.contains(document.activeElement) ? document.activeElement.id : "";
    // The region itself stays, so assistive technology announces its new content (aria-live); its attributes
    // (the version shown, whether to go on following) become the fresh page's.
    for (const name of region.getAttributeNames()) {
      if (!fresh.hasAttribute(name)) region.removeAttribute(name);
    }
    for (const name of fresh.getAttributeNames()) region.setAttribute(name, fresh.getAttribute(name));
    region.replaceChildren(...Array.from(fresh.childNodes)); // a copy: moving nodes empties the live list
    // What the messages said was about the page before: the fresh page's messages take their place.
    document.querySelectorAll("ul.messagelist").forEach((list) => list.remove());
    const messages = page.querySelector("ul.messagelist");
    const content = document.getElementById("content");
    if (messages && content) content.before(document.adoptNode(messages));
    if (focused && document.getElementById(focused)) document.getElementById(focused).focus();
  }

  function follow(region) {
    const every = Number(region.dataset.liveEvery) || 5000;
    let delay = every;
    let seen = fields(region);

    async function poll() {
      if (!document.hidden && fields(region) === seen) {
        try {
          const answer = await fetch(region.dataset.live, { headers: { Accept: "application/json" } });
          const status = await answer.json();
          if (String(status.version) !== region.dataset.liveVersion) {
            await swap(region);
            seen = fields(region);
            delay = every;
          } else if (status.moving === false) {
            return;
          } else {
            delay = Math.min(delay * 2, Math.max(every, SLOWEST_MS));
          }
        } catch (error) {
          // A failed poll (a restart, a dropped connection) is simply asked again.
        }
      }
      // The fresh region says whether it is still to be followed.
      if (region.dataset.live) setTimeout(poll, delay);
    }
    setTimeout(poll, delay);
  }

  document.querySelectorAll("[data-live]").forEach(follow);
})();
