// RequireJS reads a global `require` object as its configuration when it loads. The ipywidgets manager finds its
// own files (fonts, chunks) through its module path; point that path at the copy served by the book itself.
var require = {
  paths: {
    "@jupyter-widgets/html-manager/dist": new URL("html-manager", document.currentScript.src).href,
  },
};
