// Search results quote the page's text, where a formula is still TeX source such as \(\mathbf{W}_q\). Show it as
// plain text instead (W_q): drop the delimiters, commands and braces, keep the letters, digits and operators.
(() => {
  const plain = (tex) =>
    tex
      .replace(/\\(?:operatorname|mathrm|mathbf|boldsymbol|mathcal|mathit|text|textrm)\s*/g, "")
      .replace(/\\(?:left|right|big|Big|,|;|!|quad|qquad)/g, " ")
      .replace(/\\([a-zA-Z]+)/g, (_, name) => ({ top: "ᵀ", sqrt: "√", cdot: "·", times: "×", in: "∈", to: "→",
        le: "≤", ge: "≥", ne: "≠", sum: "Σ", infty: "∞", alpha: "α", beta: "β", sigma: "σ", tau: "τ", mu: "μ",
        ell: "ℓ", delta: "δ", theta: "θ", lambda: "λ", epsilon: "ε", odot: "⊙", exp: "exp", log: "log",
        softmax: "softmax" }[name] || name))
      .replace(/[{}]/g, "")
      .replace(/\s+/g, " ")
      .trim();
  const clean = (text) =>
    text.replace(/\\\((.*?)\\\)/gs, (_, tex) => plain(tex)).replace(/\\\[(.*?)\\\]/gs, (_, tex) => plain(tex))
      .replace(/\$\$(.*?)\$\$/gs, (_, tex) => plain(tex));
  // Each summary is cleaned once (setting its text is itself a change the observer sees).
  const fix = (node) => {
    node.querySelectorAll("p.context:not([data-math-cleaned])").forEach((p) => {
      p.setAttribute("data-math-cleaned", "");
      if (p.textContent.includes("\\")) p.textContent = clean(p.textContent);
    });
  };
  const start = () => {
    const results = document.getElementById("search-results");
    if (!results) return;
    fix(results);
    new MutationObserver(() => fix(results)).observe(results, { childList: true, subtree: true });
  };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
