#include "report/chart_fit.h"

namespace mt {

namespace {

// AxisScale (axis_scale.cpp) in the browser's doubles, and short_number (svg_chart.cpp).
const char* axis_scale_script() {
  return R"(
function axisLinear(lo, hi, pad) {
  var magnitude = Math.max(Math.abs(lo), Math.abs(hi));
  if (hi - lo <= magnitude * 1e-12) {
    var d = Math.max(1e-9, magnitude * 0.1);
    lo -= d; hi += d;
  }
  if (pad) { var p = (hi - lo) * 0.05; lo -= p; hi += p; }
  return {lo: lo, hi: hi, log: false};
}
function axisLog(lo, hi) {
  if (hi <= lo * 1.0001) { lo /= 2; hi *= 2; }
  return {lo: lo, hi: hi, log: true};
}
function axisFraction(a, v) {
  if (a.log) return (Math.log(v) - Math.log(a.lo)) / (Math.log(a.hi) - Math.log(a.lo));
  return (v - a.lo) / (a.hi - a.lo);
}
function logTicks(a) {
  var t = [];
  for (var e = Math.floor(Math.log10(a.lo)); e <= Math.ceil(Math.log10(a.hi)); e++)
    [1, 2, 5].forEach(function (m) {
      var v = m * Math.pow(10, e);
      if (v >= a.lo * (1 - 1e-9) && v <= a.hi * (1 + 1e-9) && isFinite(v) && v > 0) t.push(v);
    });
  if (t.length <= 7) return t;
  var powers = t.filter(function (v) {
    return Math.abs(Math.log10(v) - Math.round(Math.log10(v))) < 1e-9;
  });
  var every = Math.max(1, Math.floor((powers.length + 7) / 8));
  return powers.filter(function (v, i) { return i % every === 0; });
}
function axisTicks(a, want) {
  if (a.log) return logTicks(a);
  var span = a.hi - a.lo, step = Math.pow(10, Math.floor(Math.log10(span / want)));
  var ratio = span / want / step, t = [];
  step *= ratio >= 7.5 ? 10 : ratio >= 3.5 ? 5 : ratio >= 1.5 ? 2 : 1;
  var first = Math.ceil(a.lo / step), last = Math.floor(a.hi / step);
  if (!(last >= first) || last - first > 100) return t;
  for (var k = 0; k <= last - first; k++) {
    var v = (first + k) * step;
    if (isFinite(v)) t.push(Math.abs(v) < step * 1e-9 ? 0 : v);
  }
  return t;
}
// C's %.<p>g: p significant digits, trailing zeros dropped, an exponent below 1e-4 or from
// 10^p on (the exponent taken after rounding, as printf does).
function gFormat(v, p) {
  if (v === 0) return '0';
  var parts = v.toExponential(p - 1).split('e'), e = Number(parts[1]);
  var strip = function (s) { return s.indexOf('.') < 0 ? s : s.replace(/0+$/, '').replace(/\.$/, ''); };
  if (e < -4 || e >= p)
    return strip(parts[0]) + 'e' + (e < 0 ? '-' : '+') + (Math.abs(e) < 10 ? '0' : '') + Math.abs(e);
  return strip(v.toFixed(p - 1 - e));
}
function shortNumber(v) {
  return gFormat(v, v !== 0 && (Math.abs(v) >= 1e6 || Math.abs(v) < 1e-3) ? 3 : 4);
}
)";
}

// The fit itself: svg_line_chart's ranges over the shown marks, then every mark re-placed
// and the ticks redrawn in the server's markup.
const char* fit_script() {
  return R"(
function marksOf(svg) { return Array.prototype.slice.call(svg.querySelectorAll('[data-xy]')); }
function valuesOf(e) {
  return e.getAttribute('data-xy').trim().split(/\s+/).filter(Boolean).map(function (p) {
    return p.split(',').map(Number);
  });
}
function boundsOf(marks) {
  var b = {x0: Infinity, x1: -Infinity, y0: Infinity, y1: -Infinity};
  marks.forEach(function (e) {
    valuesOf(e).forEach(function (p) {
      b.x0 = Math.min(b.x0, p[0]); b.x1 = Math.max(b.x1, p[0]);
      b.y0 = Math.min(b.y0, p[1]); b.y1 = Math.max(b.y1, p[1]);
    });
  });
  return b.x1 >= b.x0 ? b : null;
}
function fitChart(svg, area, hidden) {
  var marks = marksOf(svg);
  var b = boundsOf(marks.filter(function (e) { return !hidden[e.getAttribute('data-run')]; })) ||
          boundsOf(marks);
  if (!b) return;
  if (b.x1 === b.x0) { b.x0 -= 1; b.x1 += 1; }
  var left = Number(area.getAttribute('x')), top = Number(area.getAttribute('y'));
  var w = Number(area.getAttribute('width')), h = Number(area.getAttribute('height'));
  var xs = axisLinear(b.x0, b.x1, false);
  var ys = area.getAttribute('data-log-y') === '1' ? axisLog(b.y0, b.y1) : axisLinear(b.y0, b.y1, true);
  var px = function (x) { return (left + axisFraction(xs, x) * w).toFixed(1); };
  var py = function (y, d) { return (top + h - axisFraction(ys, y) * h + (d || 0)).toFixed(1); };
  marks.forEach(function (e) {
    var v = valuesOf(e);
    if (e.tagName.toLowerCase() === 'circle') {
      e.setAttribute('cx', px(v[0][0])); e.setAttribute('cy', py(v[0][1]));
      return;
    }
    var points = v.map(function (p) { return px(p[0]) + ',' + py(p[1]); }).join(' ');
    e.setAttribute('points', points);
    if (e.classList.contains('smoothable')) e.dataset.raw = points;
  });
  svg.querySelector('g.y-ticks').innerHTML = axisTicks(ys, 5).map(function (t) {
    return '<line x1="' + left + '" x2="' + (left + w) + '" y1="' + py(t) + '" y2="' + py(t) +
        '" class="grid"/><text x="' + (left - 4) + '" y="' + py(t, 4) +
        '" class="tick" text-anchor="end">' + shortNumber(t) + '</text>';
  }).join('\n');
  svg.querySelector('g.x-ticks').innerHTML = axisTicks(xs, 6).map(function (t) {
    return '<line x1="' + px(t) + '" x2="' + px(t) + '" y1="' + (top + h) + '" y2="' + (top + h + 4) +
        '" class="frame"/><text x="' + px(t) + '" y="' + (top + h + 16) +
        '" class="tick" text-anchor="middle">' + shortNumber(t) + '</text>';
  }).join('\n');
}
function fitCharts(hidden) {
  Array.prototype.slice.call(document.querySelectorAll('svg.chart')).forEach(function (svg) {
    var area = svg.querySelector('rect.plot-area');
    if (area) fitChart(svg, area, hidden);
  });
}
)";
}

}  // namespace

std::string chart_fit_script() {
  return std::string(axis_scale_script()) + fit_script();
}

}  // namespace mt
