// The decision form: show the outcome fields (conclusion, result) the chosen kind takes, hide the others.
(function () {
  "use strict";

  function show() {
    const chosen = document.querySelector("#kinds input[name=kind]:checked");
    const takes = chosen ? chosen.dataset.outcome.split(" ") : [];
    document.querySelectorAll("[data-outcome-field]").forEach((row) => {
      row.hidden = !takes.includes(row.dataset.outcomeField);
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    document.querySelectorAll("#kinds input[name=kind]").forEach((radio) => radio.addEventListener("change", show));
    show();
  });
})();
