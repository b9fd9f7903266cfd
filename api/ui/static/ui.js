// operator-db's pages: sortable tables (keyboard too) and the jobs list refreshing itself.
"use strict";

function cellValue(row, index) {
  const cell = row.cells[index];
  if (!cell) return "";
  const value = cell.dataset.sort !== undefined ? cell.dataset.sort : cell.textContent.trim();
  const number = Number(value);
  return value !== "" && !Number.isNaN(number) ? number : value;
}

function sortBy(table, index, header) {
  const ascending = header.getAttribute("aria-sort") !== "ascending";
  for (const th of table.tHead.rows[0].cells) th.removeAttribute("aria-sort");
  header.setAttribute("aria-sort", ascending ? "ascending" : "descending");
  const body = table.tBodies[0];
  const rows = Array.from(body.rows);
  rows.sort((a, b) => {
    const x = cellValue(a, index), y = cellValue(b, index);
    if (x === "" && y !== "") return 1;
    if (y === "" && x !== "") return -1;
    const order = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
    return ascending ? order : -order;
  });
  for (const row of rows) body.appendChild(row);
}

function makeSortable(root) {
  for (const table of root.querySelectorAll("table.sortable")) {
    if (!table.tHead || table.dataset.sortable) continue;
    table.dataset.sortable = "yes";
    Array.from(table.tHead.rows[0].cells).forEach((th, index) => {
      const button = document.createElement("button");
      button.type = "button";
      button.textContent = th.textContent;
      button.title = "Sort by " + th.textContent;
      th.textContent = "";
      th.appendChild(button);
      button.addEventListener("click", () => sortBy(table, index, th));
    });
  }
}

function refreshJobs() {
  const box = document.getElementById("jobs");
  const live = document.getElementById("live");
  if (!box || !live) return;
  setInterval(async () => {
    if (!live.checked || document.hidden) return;
    try {
      const response = await fetch(box.dataset.src, { headers: { Accept: "text/html" } });
      if (!response.ok) return;
      box.innerHTML = await response.text();
      makeSortable(box);
    } catch (error) {
      // The server is away for a moment: keep the last table, try again in 5 s.
    }
  }, 5000);
}

// A bar's length comes from its data-share (a percentage): the CSP allows no style attribute.
function drawBars(root) {
  for (const bar of root.querySelectorAll(".bar[data-share]")) {
    bar.style.setProperty("--share", Number(bar.dataset.share) + "%");
  }
}

document.addEventListener("DOMContentLoaded", () => {
  drawBars(document);
  makeSortable(document);
  refreshJobs();
});
