// vramtrace report: zooming a plot's time axis. The plot comes drawn for the whole run
// (render/plot.rs); every element placed in time carries its time (data-t, data-t1 for a
// phase's end) and each line's points are in the embedded data, so a zoom places them
// again for the window shown instead of stretching the picture: a run whose work is all
// in its first millisecond of six seconds reads once that millisecond is brushed.
// Drag across the plot to zoom in; double-click it or press its button to zoom out.
// bucket: the time a line's point stands for (a window of a few shows no finer lines,
// which `note` then says); button: shown while zoomed, it zooms out.
function vtZoom(svg, lines, bucket, button, note, onzoom) {
  var NS = 'http://www.w3.org/2000/svg';
  var num = function (name) { return +svg.getAttribute('data-' + name); };
  var left = num('left'), right = num('right'), tend = num('tend');
  var ytop = num('ytop'), top = num('top'), bottom = num('bottom');
  var width = svg.viewBox.baseVal.width;
  // Narrower than this a window says nothing more: the trace's clock ticks in ns.
  var MIN_NS = 1000;
  // A snapshot without times is one moment (render/plot.rs): no time to zoom into.
  var timeless = tend <= 1;
  var z = { t0: 0, t1: tend, dragged: false };
  var hit = svg.querySelector('.vt-hit'), brush = svg.querySelector('.vt-brush');
  var label = svg.querySelector('.vt-axis-label');
  var whole = label ? label.textContent : '';
  var polylines = svg.querySelectorAll('polyline.vt-line');

  z.x = function (t) { return left + (right - left) * (t - z.t0) / (z.t1 - z.t0); };
  z.zoomed = function () { return z.t0 > 0 || z.t1 < tend; };
  // The plot's x and the time under a mouse event, inside the plot area.
  z.at = function (ev) {
    var m = svg.getScreenCTM();
    if (!m) return { t: z.t0, x: left };
    var pt = svg.createSVGPoint();
    pt.x = ev.clientX; pt.y = ev.clientY;
    var p = pt.matrixTransform(m.inverse());
    var f = Math.min(1, Math.max(0, (p.x - left) / (right - left)));
    return { t: z.t0 + f * (z.t1 - z.t0), x: left + f * (right - left) };
  };

  function y(b) { return top + (bottom - top) * (1 - Math.min(b / ytop, 1)); }
  // The last index with t[i] <= x, or -1.
  function last(t, x) {
    var lo = -1, hi = t.length - 1;
    while (lo < hi) { var mid = (lo + hi + 1) >> 1; if (t[mid] <= x) lo = mid; else hi = mid - 1; }
    return lo;
  }
  // As render/plot.rs's tick_step and trim_secs: 1, 2 or 5 times a power of ten.
  function tickStep(range, n) {
    var raw = Math.max(range / n, 1e-12), mag = Math.pow(10, Math.floor(Math.log10(raw)));
    var steps = [1, 2, 5, 10];
    for (var i = 0; i < steps.length; i++) if (steps[i] * mag >= raw) return steps[i] * mag;
    return 10 * mag;
  }
  function secs(s, step) {
    var digits = Math.min(9, Math.max(0, Math.ceil(-Math.log10(step) - 1e-9)));
    var t = s.toFixed(digits);
    if (t.indexOf('.') >= 0) t = t.replace(/0+$/, '').replace(/\.$/, '');
    return t + 's';
  }
  function add(parent, tag, attrs, text) {
    var e = document.createElementNS(NS, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    parent.appendChild(e);
  }

  function axis() {
    var g = svg.querySelector('.vt-xaxis');
    if (!g) return;
    while (g.firstChild) g.removeChild(g.firstChild);
    var step = tickStep((z.t1 - z.t0) / 1e9, 8);
    for (var k = Math.ceil(z.t0 / 1e9 / step - 1e-9); k * step * 1e9 <= z.t1 * 1.0001; k++) {
      var s = k * step, x = z.x(s * 1e9).toFixed(1);
      add(g, 'line', { x1: x, x2: x, y1: bottom, y2: bottom + 4, stroke: '#999' });
      add(g, 'text', { x: x, y: bottom + 15, 'text-anchor': 'middle', fill: '#555' }, secs(s, step));
    }
  }

  function place() {
    svg.querySelectorAll('[data-t]').forEach(function (e) {
      var t = +e.getAttribute('data-t'), x = z.x(t);
      var inside = t >= z.t0 && t <= z.t1;
      if (e.hasAttribute('data-t1')) {
        var x0 = Math.max(x, left), x1 = Math.min(z.x(+e.getAttribute('data-t1')), right);
        inside = x1 >= x0;
        e.setAttribute('x', x0.toFixed(1));
        e.setAttribute('width', Math.max(1, x1 - x0).toFixed(1));
      } else if (e.tagName === 'line') {
        e.setAttribute('x1', x.toFixed(1)); e.setAttribute('x2', x.toFixed(1));
      } else if (e.tagName === 'circle') {
        e.setAttribute('cx', x.toFixed(1));
      } else if (e.tagName === 'text') {
        var dx = +e.getAttribute('data-dx');
        if (e.hasAttribute('data-end') && t < z.t0) {
          // A phase begun before the window keeps its name at the window's left.
          x = left; inside = +e.getAttribute('data-end') >= z.t0;
        }
        // Near the right edge a label ends at its mark instead of running off the plot.
        var end = x > width - 160;
        e.setAttribute('text-anchor', end ? 'end' : 'start');
        e.setAttribute('x', (end ? x - dx : x + dx).toFixed(1));
      }
      e.setAttribute('visibility', inside ? 'visible' : 'hidden');
    });
    // The categories' areas are drawn for the whole run: hidden while zoomed, with their
    // legend.
    svg.querySelectorAll('.vt-area, .vt-area-legend').forEach(function (e) {
      e.setAttribute('visibility', z.zoomed() ? 'hidden' : 'visible');
    });
  }

  function paths() {
    lines.forEach(function (l, k) {
      var p = polylines[k];
      if (!p) return;
      // A line that begins after the window has nothing in it.
      if (!l.t.length || l.t[0] > z.t1) { p.setAttribute('points', ''); return; }
      var j = Math.max(0, last(l.t, z.t0)), pts = [];
      pts.push(z.x(Math.max(l.t[j], z.t0)).toFixed(1) + ',' + y(l.b[j]).toFixed(1));
      for (j = j + 1; j < l.t.length && l.t[j] <= z.t1; j++) {
        var x = z.x(l.t[j]).toFixed(1);
        pts.push(x + ',' + y(l.b[j - 1]).toFixed(1), x + ',' + y(l.b[j]).toFixed(1));
      }
      // The last value holds to the window's end.
      pts.push(right.toFixed(1) + ',' + y(l.b[j - 1]).toFixed(1));
      p.setAttribute('points', pts.join(' '));
    });
  }

  z.set = function (t0, t1) {
    if (timeless) return;
    t0 = Math.max(0, Math.min(t0, t1)); t1 = Math.min(tend, Math.max(t0, t1));
    if (t1 - t0 < MIN_NS) {
      var mid = (t0 + t1) / 2;
      t0 = Math.max(0, mid - MIN_NS / 2); t1 = Math.min(tend, t0 + MIN_NS);
    }
    z.t0 = t0; z.t1 = t1;
    axis(); place(); paths();
    if (label) {
      label.textContent = z.zoomed()
        ? secs(t0 / 1e9, (t1 - t0) / 1e10) + ' to ' + secs(t1 / 1e9, (t1 - t0) / 1e10) + ' shown; double-click to zoom out'
        : whole;
    }
    if (button) button.hidden = !z.zoomed();
    if (note) {
      note.hidden = !z.zoomed() || t1 - t0 >= 20 * bucket;
      note.textContent = 'lines in steps of ' + secs(bucket / 1e9, bucket / 1e10) + ' (report --resolution for finer)';
    }
    if (onzoom) onzoom(z);
  };
  z.reset = function () { z.set(0, tend); };

  // The brush: a drag of a few units zooms; less is a click (the live set).
  var from = null;
  hit.addEventListener('mousedown', function (ev) {
    if (ev.button !== 0 || timeless) return;
    from = z.at(ev); z.dragged = false;
    ev.preventDefault();
  });
  hit.addEventListener('mousemove', function (ev) {
    if (!from) return;
    var p = z.at(ev);
    brush.setAttribute('x', Math.min(from.x, p.x).toFixed(1));
    brush.setAttribute('width', Math.abs(p.x - from.x).toFixed(1));
    brush.setAttribute('visibility', 'visible');
  });
  window.addEventListener('mouseup', function (ev) {
    if (!from) return;
    var p = z.at(ev), a = from;
    from = null;
    brush.setAttribute('visibility', 'hidden');
    if (Math.abs(p.x - a.x) < 5) return;
    z.dragged = true;
    z.set(Math.min(a.t, p.t), Math.max(a.t, p.t));
  });
  hit.addEventListener('dblclick', function () { z.reset(); });
  if (button) button.addEventListener('click', function () { z.reset(); });
  return z;
}
