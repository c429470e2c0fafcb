// llmgw portal: small improvements to pages that work without it.
// Copy buttons (shown only when this script runs), and a confirmation before
// forms that marked themselves with data-confirm.
(function () {
  "use strict";

  function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) {
      return navigator.clipboard.writeText(text);
    }
    var area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.className = "visually-hidden";
    document.body.appendChild(area);
    area.select();
    try { document.execCommand("copy"); } finally { document.body.removeChild(area); }
    return Promise.resolve();
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("button.copy[data-copy]").forEach(function (button) {
      var target = document.getElementById(button.getAttribute("data-copy"));
      if (!target) { return; }
      button.hidden = false;
      var label = button.textContent;
      button.addEventListener("click", function () {
        copyText(target.textContent).then(function () {
          button.textContent = "✓ " + label;
          setTimeout(function () { button.textContent = label; }, 1500);
        });
      });
    });
    document.querySelectorAll("form[data-confirm]").forEach(function (form) {
      form.addEventListener("submit", function (event) {
        if (!window.confirm(form.getAttribute("data-confirm"))) { event.preventDefault(); }
      });
    });
  });
})();
