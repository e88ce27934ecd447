// The console's only script (no build step, no dependencies): asks before destructive forms
// (data-confirm) and reloads a page that follows something in progress (data-refresh seconds).
"use strict";
document.addEventListener("submit", (event) => {
  const button = event.submitter;
  const message = (button && button.dataset.confirm) || event.target.dataset.confirm;
  if (message && !window.confirm(message)) event.preventDefault();
});
document.addEventListener("DOMContentLoaded", () => {
  const el = document.querySelector("[data-refresh]");
  if (el) setTimeout(() => window.location.reload(), 1000 * Number(el.dataset.refresh));
});
