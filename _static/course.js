// The drawers of a phone (the chapter list and the page's contents) close once the reader has chosen where to go:
// a link to a section of the same page would otherwise leave the drawer open over the section it scrolled to.
document.addEventListener("click", (event) => {
  const link = event.target.closest(".bd-sidebar-primary a[href], .bd-sidebar-secondary a[href]");
  if (!link) return;
  for (const id of ["pst-primary-sidebar-checkbox", "pst-secondary-sidebar-checkbox"]) {
    const toggle = document.getElementById(id);
    if (toggle && toggle.checked) toggle.checked = false;
  }
});
