#include "schedule/schedule_render.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <vector>

#include "core/error.h"

namespace mt {

namespace {

std::string label(const Schedule& s, const Action& a) {
  std::string l = str(action_kind_name(a.kind), a.microbatch);
  return s.chunks > 1 ? str(l, ".", a.chunk) : l;
}

// What a timeline draws for one timed action: one box, or an FB's two halves (the F half
// labelled with a trailing '&' in text).
struct Box {
  Action shown;  // F, B or W: kind, microbatch and chunk of the box
  double start, end;
  bool fb_half;
};

std::vector<Box> boxes(const Action& a, const TimedAction& ta) {
  if (a.kind != ActionKind::FB) return {{a, ta.start, ta.end, false}};
  return {{forward_half(a), ta.start, ta.f_end, true},
          {backward_half(a), ta.b_start, ta.end, true}};
}

std::string box_label(const Schedule& s, const Box& b) {
  const std::string l = label(s, b.shown);
  return b.fb_half && b.shown.kind == ActionKind::F ? l + "&" : l;
}

bool multiple_of(double x, double q) {
  return std::fabs(x / q - std::round(x / q)) < 1e-6;
}

// The coarsest quantum that every start and end is a whole multiple of.
double time_quantum(const Schedule& s, const Timeline& t) {
  double smallest = 0;
  for (int st = 0; st < s.stages; ++st)
    for (const TimedAction& ta : t.stages[st])
      if (ta.end > ta.start && (smallest == 0 || ta.end - ta.start < smallest))
        smallest = ta.end - ta.start;
  if (smallest == 0) return 1;
  for (int div = 1; div <= 12; ++div) {
    const double q = smallest / div;
    bool ok = true;
    for (int st = 0; st < s.stages && ok; ++st)
      for (const TimedAction& ta : t.stages[st])
        ok = ok && multiple_of(ta.start, q) && multiple_of(ta.end, q);
    if (ok) return q;
  }
  return smallest;
}

}  // namespace

void render_ascii(const Schedule& s, const Timeline& t, std::ostream& os) {
  const double q = time_quantum(s, t);
  size_t cell = 2;
  for (const auto& list : s.actions)
    for (const Action& a : list)
      if (is_compute(a.kind))
        for (const Box& b : boxes(a, TimedAction{}))
          cell = std::max(cell, box_label(s, b).size() + 1);
  // A row is one cell per quantum; costs and latency many orders apart would make it
  // billions of cells (--latency 1e12 printed for minutes). Past a screenful of screens the
  // picture says nothing: say so, and let the figures below and --svg speak.
  constexpr double kMaxCells = 4096;
  if (t.makespan / q > kMaxCells) {
    os << "(timeline not drawn: " << t.makespan / q << " cells of " << q
       << " time units; the costs and the latency are too far apart for text)\n";
    return;
  }
  const long cells = std::lround(t.makespan / q);
  for (int st = 0; st < s.stages; ++st) {
    std::string row;
    for (long c = 0; c < cells; ++c) row.append(1, '.').append(cell - 1, ' ');
    for (const TimedAction& ta : t.stages[st]) {
      const Action& a = s.actions[st][ta.index];
      if (!is_compute(a.kind)) continue;
      for (const Box& b : boxes(a, ta)) {
        const long c0 = std::lround(b.start / q), c1 = std::lround(b.end / q);
        if (c1 <= c0) continue;
        std::string box = box_label(s, b);
        box.resize((c1 - c0) * cell - 1, '-');
        row.replace(c0 * cell, box.size() + 1, box + " ");
      }
    }
    while (!row.empty() && row.back() == ' ') row.pop_back();
    os << "stage " << std::setw(2) << st << " | " << row << "\n";
  }
  os << "one cell = " << q << " time unit" << (q == 1 ? "" : "s") << "; F forward, B "
     << (s.split_backward ? "input gradient, W weight gradient" : "backward (B+W fused)")
     << (s.chunks > 1 ? ", .c = local chunk c" : "")
     << (s.placement == ChunkPlacement::v_shape ? " (0 down, 1 up the V), F3& B1 = an F&B pair"
                                                : "")
     << ", . idle\n";
}

namespace {

const char* fill(ActionKind k, int chunk) {
  // Tableau colours: blue forward, orange input gradient, green weight gradient; chunk 1
  // and 2 lighter and darker so interleaving stays readable.
  static const char* f[] = {"#4e79a7", "#a0cbe8", "#2c4a6b"};
  static const char* b[] = {"#f28e2b", "#ffbe7d", "#a35a10"};
  static const char* w[] = {"#59a14f", "#8cd17d", "#2f6b2a"};
  const int c = chunk % 3;
  return k == ActionKind::F ? f[c] : k == ActionKind::B ? b[c] : w[c];
}

void draw_box(std::ostream& os, const Schedule& s, const Box& b, double x, double w, double y,
              double row_h) {
  if (w <= 0) return;
  const Action& a = b.shown;
  const bool dark_text = a.chunk % 3 == 1;
  os << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"" << w << "\" height=\"" << row_h
     << "\" fill=\"" << fill(a.kind, a.chunk) << "\" stroke=\"white\"/>\n";
  if (w >= 12)
    os << "<text x=\"" << x + w / 2 << "\" y=\"" << y + row_h / 2 + 4
       << "\" text-anchor=\"middle\" fill=\"" << (dark_text ? "black" : "white") << "\">"
       << (w >= 24 ? label(s, a) : str(a.microbatch)) << "</text>\n";
}

}  // namespace

void render_svg(const Schedule& s, const Timeline& t, const std::string& title, std::ostream& os) {
  const double left = 70, top = 40, row_h = 30, gap = 6;
  const double unit = std::clamp(900.0 / std::max(t.makespan, 1e-9), 4.0, 24.0);
  const double width = left + t.makespan * unit + 20;
  const double rows_bottom = top + s.stages * (row_h + gap);
  const double height = rows_bottom + 70;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
     << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
     << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
     << "<text x=\"" << left << "\" y=\"22\" font-size=\"14\" font-weight=\"bold\">" << title
     << "</text>\n";
  for (int st = 0; st < s.stages; ++st) {
    const double y = top + st * (row_h + gap);
    os << "<text x=\"8\" y=\"" << y + row_h / 2 + 4 << "\">stage " << st << "</text>\n"
       << "<rect x=\"" << left << "\" y=\"" << y << "\" width=\"" << t.makespan * unit
       << "\" height=\"" << row_h << "\" fill=\"#f4f4f4\" stroke=\"#cccccc\"/>\n";
    for (const TimedAction& ta : t.stages[st]) {
      const Action& a = s.actions[st][ta.index];
      if (!is_compute(a.kind) || ta.end <= ta.start) continue;
      for (const Box& b : boxes(a, ta))
        draw_box(os, s, b, left + b.start * unit, (b.end - b.start) * unit, y, row_h);
      // DualPipe's picture: a shared black border around the two halves of a pair.
      if (a.kind == ActionKind::FB)
        os << "<rect x=\"" << left + ta.start * unit << "\" y=\"" << y << "\" width=\""
           << (ta.end - ta.start) * unit << "\" height=\"" << row_h
           << "\" fill=\"none\" stroke=\"black\" stroke-width=\"1.5\"/>\n";
    }
  }
  // time axis: a tick per whole time unit when that stays legible
  const double step = t.makespan <= 60 ? 1 : std::ceil(t.makespan / 60);
  for (double x = 0; x <= t.makespan + 1e-9; x += step)
    os << "<line x1=\"" << left + x * unit << "\" y1=\"" << rows_bottom << "\" x2=\""
       << left + x * unit << "\" y2=\"" << rows_bottom + 4 << "\" stroke=\"#888888\"/>\n";
  os << "<text x=\"" << left << "\" y=\"" << rows_bottom + 16 << "\" fill=\"#555555\">time "
     << "(ticks every " << step << " unit" << (step == 1 ? "" : "s") << ")</text>\n";
  // legend
  std::vector<std::pair<ActionKind, std::string>> keys = {
      {ActionKind::F, "F forward"},
      {ActionKind::B, s.split_backward ? "B input gradient" : "B backward (B+W)"}};
  if (s.split_backward) keys.push_back({ActionKind::W, "W weight gradient"});
  double x = left;
  const double ly = rows_bottom + 30;
  for (const auto& [kind, text] : keys) {
    os << "<rect x=\"" << x << "\" y=\"" << ly << "\" width=\"14\" height=\"14\" fill=\""
       << fill(kind, 0) << "\"/>\n<text x=\"" << x + 18 << "\" y=\"" << ly + 11 << "\">" << text
       << "</text>\n";
    x += 150;
  }
  os << "<rect x=\"" << x << "\" y=\"" << ly << "\" width=\"14\" height=\"14\" fill=\"#f4f4f4\" "
     << "stroke=\"#cccccc\"/>\n<text x=\"" << x + 18 << "\" y=\"" << ly + 11 << "\">idle</text>\n";
  if (s.chunks > 1)
    os << "<text x=\"" << x + 70 << "\" y=\"" << ly + 11
       << "\">labels mb.chunk; lighter/darker = local chunk 1/2"
       << (s.placement == ChunkPlacement::v_shape
               ? " (chunk 1: up the V); black border: F&amp;B pair"
               : "")
       << "</text>\n";
  os << "</svg>\n";
}

}  // namespace mt
