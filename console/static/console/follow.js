// While the background has records of this instance to consume, ask for its status every second; once
// it has consumed them, swap in the instance as it is now (no reload: the operator's place stays).
(function () {
  "use strict";
  const LIMIT_MS = 10 * 60 * 1000;

  function follow() {
    const banner = document.getElementById("follow");
    if (!banner) return;
    const started = Date.now();

    async function poll() {
      try {
        const answer = await fetch(banner.dataset.status, { headers: { Accept: "application/json" } });
        const status = await answer.json();
        if (status.pending === 0) {
          const html = await (await fetch(window.location.href)).text();
          const fresh = new DOMParser().parseFromString(html, "text/html").getElementById("weave-instance");
          document.getElementById("weave-instance").replaceWith(fresh);
          follow(); // the fresh page may be waiting for newer records
          return;
        }
      } catch (error) {
        // A failed poll (a restart, a dropped connection) is simply asked again.
      }
      if (Date.now() - started < LIMIT_MS) {
        setTimeout(poll, 1000);
      } else {
        banner.textContent += " Stopped following after 10 minutes: reload the page to see where it stands.";
      }
    }
    setTimeout(poll, 1000);
  }

  follow();
})();
