/* The report site (esc report): sortable tables, the dialogue filters of a target's page, and the
   columns of a side-by-side page. Plain JavaScript, no library, nothing fetched: it runs from file://. */
(function () {
  "use strict";

  function cellKey(row, index) {
    var cell = row.cells[index];
    if (!cell) { return null; }
    var value = cell.getAttribute("data-sort");
    if (value === null) { value = cell.getAttribute("data-value"); }  // a report's figure
    if (value === null) { value = cell.textContent.trim(); }
    if (value === "") { return null; }
    var number = Number(value);
    return isNaN(number) ? value.toLowerCase() : number;
  }

  function compareKeys(a, b) {
    if (typeof a === "number" && typeof b === "number") { return a - b; }
    if (typeof a === "number") { return -1; }
    if (typeof b === "number") { return 1; }
    return a < b ? -1 : a > b ? 1 : 0;
  }

  // Sort a table's body by one column; empty cells (n/a) stay last either way.
  function sortTable(table, index, descending) {
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var keyed = rows.map(function (row, i) { return { row: row, key: cellKey(row, index), i: i }; });
    keyed.sort(function (x, y) {
      if (x.key === null || y.key === null) {
        return x.key === y.key ? x.i - y.i : (x.key === null ? 1 : -1);
      }
      var c = compareKeys(x.key, y.key);
      return (descending ? -c : c) || x.i - y.i;
    });
    var fragment = document.createDocumentFragment();
    keyed.forEach(function (k) { fragment.appendChild(k.row); });
    body.appendChild(fragment);
    var heads = table.tHead.rows[0].cells;
    for (var h = 0; h < heads.length; h++) { heads[h].removeAttribute("aria-sort"); }
    heads[index].setAttribute("aria-sort", descending ? "descending" : "ascending");
  }

  function columnIndex(th) {
    return Array.prototype.indexOf.call(th.parentNode.cells, th);
  }

  document.querySelectorAll("table.sortable").forEach(function (table) {
    if (!table.tHead) { return; }
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th) {
      th.title = "click to sort";
      th.addEventListener("click", function () {
        var descending = th.getAttribute("aria-sort") === "ascending";
        sortTable(table, columnIndex(th), descending);
        updateOrderButton();
      });
    });
  });

  // A target's page: filters by language, topic, source, judge and mean score; worst/best first.
  var filters = document.getElementById("filters");
  var dialogues = document.getElementById("dialogues");
  var orderButton = document.getElementById("order");

  function averageHead() {
    return dialogues ? dialogues.querySelector("th[data-key=avg]") : null;
  }

  function updateOrderButton() {
    var head = averageHead();
    if (!orderButton || !head) { return; }
    orderButton.textContent = head.getAttribute("aria-sort") === "ascending" ? "Best first" : "Worst first";
  }

  function applyFilters() {
    if (!filters || !dialogues) { return; }
    var wanted = {};
    filters.querySelectorAll("[data-filter]").forEach(function (input) {
      wanted[input.getAttribute("data-filter")] = input.value.trim();
    });
    var low = wanted.min === "" || wanted.min === undefined ? null : Number(wanted.min);
    var high = wanted.max === "" || wanted.max === undefined ? null : Number(wanted.max);
    var rows = dialogues.tBodies[0].rows;
    var shown = 0;
    for (var i = 0; i < rows.length; i++) {
      var row = rows[i];
      var keep = true;
      ["language", "topic", "source", "judge"].forEach(function (name) {
        if (wanted[name] && row.getAttribute("data-" + name) !== wanted[name]) { keep = false; }
      });
      var avg = row.getAttribute("data-avg");
      if (low !== null || high !== null) {
        if (avg === "") { keep = false; }
        else {
          var value = Number(avg);
          if (low !== null && value < low) { keep = false; }
          if (high !== null && value > high) { keep = false; }
        }
      }
      row.hidden = !keep;
      shown += keep ? 1 : 0;
    }
    var counter = document.getElementById("shown");
    if (counter) { counter.textContent = shown + " of " + rows.length + " dialogues shown"; }
  }

  if (filters && dialogues) {
    filters.addEventListener("input", applyFilters);
    filters.addEventListener("change", applyFilters);
    applyFilters();
  }
  if (orderButton && dialogues) {
    orderButton.addEventListener("click", function () {
      var head = averageHead();
      var descending = head.getAttribute("aria-sort") === "ascending";
      sortTable(dialogues, columnIndex(head), descending);
      updateOrderButton();
    });
    updateOrderButton();
  }

  // A side-by-side page: show or hide each target's column.
  var columns = document.getElementById("columns");
  if (columns) {
    columns.addEventListener("change", function (event) {
      var box = event.target;
      var index = box.getAttribute("data-column");
      var column = document.querySelector("section.column[data-column='" + index + "']");
      if (column) { column.hidden = !box.checked; }
    });
  }
})();
