// The panel's only script: copy buttons, confirmation of forms that carry
// data-confirm, and the address of a page answering a form (a token's new
// value) put in the history, so that a reload does not send the form again.
// Every page works without it.
const address = document.querySelector("[data-address]");
if (address) history.replaceState(null, "", address.dataset.address);
document.addEventListener("click", (event) => {
  const button = event.target.closest("[data-copy]");
  if (!button) return;
  const source = document.getElementById(button.dataset.copy);
  if (!source) return;
  navigator.clipboard.writeText(source.textContent.trim()).then(
    () => { button.textContent = "Copied"; },
    () => { button.textContent = "Select and copy"; }
  );
});
document.addEventListener("submit", (event) => {
  const message = event.target.dataset.confirm;
  if (message && !window.confirm(message)) event.preventDefault();
});
