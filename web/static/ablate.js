// Every page: a filter <select data-autosubmit> submits its form when changed. A file of its own,
// not an inline onchange attribute, so the Content-Security-Policy allows no inline script at all.
(function () {
  "use strict";
  document.querySelectorAll("select[data-autosubmit]").forEach(function (select) {
    select.addEventListener("change", function () {
      select.form.submit();
    });
  });
})();
