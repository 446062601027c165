// Every button with data-copy puts its value on the clipboard and says so for a moment. One listener on the
// document, so rows a page swaps in later (the instance page follows the background) copy as well.
(function () {
  "use strict";
  const SHOWN_MS = 1500;

  document.addEventListener("click", async function (event) {
    const button = event.target.closest("button[data-copy]");
    if (!button) return;
    event.preventDefault();
    const label = button.dataset.label || button.textContent;
    button.dataset.label = label;
    try {
      await navigator.clipboard.writeText(button.dataset.copy);
      button.textContent = "copied";
    } catch (error) {
      // No clipboard (a page served neither over HTTPS nor from localhost): the value shows on hover instead.
      button.title = button.dataset.copy;
      button.textContent = "not copied";
    }
    setTimeout(function () {
      button.textContent = label;
    }, SHOWN_MS);
  });
})();
