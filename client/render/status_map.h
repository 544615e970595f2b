// The status map: what `moetier status` prints. One row per layer, one cell
// per expert showing the fastest tier that holds it (VRAM, RAM, disk) and
// how hot it is, then totals, hit rates, bytes moved, the queue and the
// workers, each device expert cache on a line of its own. A pure function
// of the Status message, so tests can pin it down.
#pragma once

#include <string>

#include "moetier/v1/moetier.pb.h"

namespace moetier::client {

struct MapStyle {
  // ANSI colours show heat; the glyph shows the tier. Without colour, the
  // glyph carries both: a letter per tier, upper case when hot.
  bool color = false;
  // Block glyphs (needs a UTF-8 terminal); only used with colour.
  bool unicode = false;
  // Terminal columns; a layer whose cells do not fit continues on the next
  // lines. 0: never wrap.
  int width = 0;
};

// Heat as one of five levels: 0 unused (heat 0), 1 below 25% of the hottest
// expert, 2 below 50%, 3 below 75%, 4 from 75%.
int HeatLevel(float heat);

// Plain cells (no colour) mark heat >= 50% as hot.
inline constexpr int kHotHeatLevel = 3;

// One expert's cell, escape sequences included when coloured.
std::string RenderCell(v1::ExpertTier tier, float heat, const MapStyle& style);

// The whole report, ending in a newline.
std::string RenderStatusMap(const v1::Status& status, const MapStyle& style);

}  // namespace moetier::client
