#include "report/page_controls.h"

#include "report/chart_fit.h"
#include "report/svg_chart.h"

namespace mt {

const char* report_page_style() {
  return R"(
body { font-family: sans-serif; margin: 0 24px 24px; color: #222; background: #f6f6f4; }
h1 { font-size: 20px; margin: 16px 0 4px; }
p.sub { color: #555; margin-top: 0; }
#controls { position: sticky; top: 0; z-index: 1; display: flex; flex-wrap: wrap; gap: 18px;
  align-items: center; padding: 8px 0; background: #f6f6f4; border-bottom: 1px solid #ddd;
  margin-bottom: 12px; font-size: 13px; }
#controls input[type=range] { width: 180px; vertical-align: middle; }
.run-toggle { cursor: pointer; user-select: none; padding: 2px 6px; border: 1px solid #ccc;
  border-radius: 3px; background: #fff; }
.run-toggle.off, g.legend-entry.off { opacity: 0.35; text-decoration: line-through; }
g.legend-entry[data-run-toggle] { cursor: pointer; }
.grid-charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(460px, 1fr));
  gap: 14px; }
section { background: #fff; border: 1px solid #ddd; padding: 8px; min-width: 0; }
section h2 { font-size: 14px; margin: 2px 0 6px; }
section p.note { font-size: 12px; color: #555; margin: 4px 0 0; }
svg.chart { display: block; width: 100%; height: auto; }
svg .title { font-size: 13px; font-weight: bold; }
svg .axis { font-size: 11px; fill: #444; }
svg .tick { font-size: 10px; fill: #555; }
svg .legend { font-size: 11px; fill: #222; }
svg .grid { stroke: #e6e6e6; }
svg .frame { stroke: #888; }
polyline.raw { opacity: 0.25; }
table { border-collapse: collapse; font-size: 12px; background: #fff; margin-top: 14px; }
td, th { border: 1px solid #ddd; padding: 3px 8px; text-align: left; }
tr.differs td { background: #fff3c4; }
.swatch { display: inline-block; width: 10px; height: 10px; margin-right: 4px; }
.schedule svg { max-width: 100%; height: auto; }
)";
}

std::string report_controls(const std::vector<std::string>& names,
                            const std::vector<std::string>& colors) {
  std::string out =
      "<div id=\"controls\" hidden><label>Smoothing <input type=\"range\" id=\"smoothing\" "
      "min=\"0\" max=\"0.99\" step=\"0.01\" value=\"0.6\"> <output id=\"smoothing-value\">0.6"
      "</output></label><span>Runs (click to show or hide):</span>";
  for (size_t i = 0; i < names.size(); ++i)
    out += "<span class=\"run-toggle\" data-run-toggle=\"" + std::to_string(i) +
           "\"><span class=\"swatch\" style=\"background:" + colors[i % colors.size()] +
           "\"></span>" + html_escape(names[i]) + "</span>";
  return out + "</div>\n";
}

std::string report_page_script() {
  return std::string("<script>\n(function () {") + chart_fit_script() + R"(

  var body = document.body, all = function (q) {
    return Array.prototype.slice.call(document.querySelectorAll(q));
  };
  body.dataset.charts = all('svg.chart, .schedule svg').length;
  var lines = all('polyline.smoothable');
  lines.forEach(function (l) {
    var raw = l.cloneNode(true);
    raw.setAttribute('class', 'raw');
    l.parentNode.insertBefore(raw, l);
    l.dataset.raw = l.getAttribute('points').trim();
  });
  function smooth(w) {
    lines.forEach(function (l) {
      var last = 0, n = 0;
      l.setAttribute('points', l.dataset.raw.split(/\s+/).map(function (p) {
        var xy = p.split(',').map(Number);
        last = last * w + (1 - w) * xy[1];
        n += 1;
        var y = w >= 1 ? xy[1] : last / (1 - Math.pow(w, n));
        return xy[0].toFixed(1) + ',' + y.toFixed(1);
      }).join(' '));
    });
    document.getElementById('smoothing-value').textContent = w;
    body.dataset.smoothing = w;
  }
  var hidden = {};
  function show(run, on) {
    if (on) delete hidden[run]; else hidden[run] = true;
    all('[data-run="' + run + '"]').forEach(function (e) { e.style.display = on ? '' : 'none'; });
    all('[data-run-toggle="' + run + '"]').forEach(function (e) { e.classList.toggle('off', !on); });
    body.dataset.hidden = Object.keys(hidden).sort().join(',');
    fitCharts(hidden);
    smooth(Number(slider.value));
  }
  var state = new URLSearchParams(location.hash.slice(1));
  var slider = document.getElementById('smoothing');
  if (state.has('smoothing')) slider.value = Math.min(0.99, Math.max(0, Number(state.get('smoothing')) || 0));
  slider.addEventListener('input', function () { smooth(Number(slider.value)); });
  all('[data-run-toggle]').forEach(function (e) {
    e.addEventListener('click', function () {
      var run = e.dataset.runToggle;
      show(run, !!hidden[run]);
    });
  });
  (state.get('hide') || '').split(',').forEach(function (r) { if (r !== '') show(r, false); });
  smooth(Number(slider.value));
  document.getElementById('controls').hidden = false;
  var grid = document.querySelector('.grid-charts'), chart = document.querySelector('svg.chart');
  if (grid && chart)
    body.dataset.layout = getComputedStyle(grid).gridTemplateColumns.split(' ').length + 'x' +
        Math.round(chart.getBoundingClientRect().width) + '/' + Math.round(grid.clientWidth);
})();
</script>
)";
}

}  // namespace mt
