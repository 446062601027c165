// An operator who has not chosen a zone yet finds the browser's own filled in on the Preferences page (saved only
// when they press Save); a zone the server does not know, or one the operator has already typed, is left alone.
(function () {
  "use strict";
  const field = document.querySelector("#id_time_zone[data-offer-browser-zone]");
  if (!field) return;
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
  const known = [...document.getElementById("time-zones").options].some((option) => option.value === zone);
  if (!known || zone === field.defaultValue || field.value !== field.defaultValue) return;
  field.value = zone;
  document.getElementById("browser-zone").hidden = false;
})();
