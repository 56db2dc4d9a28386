#pragma once
// The part of <chrono> dflash uses: clocks, durations, time points and their
// literals. In C++20, libstdc++ (11 and later) puts the calendar, time zones
// and their stream output in <chrono> as well, with <sstream> behind them:
// about 0.07 s of CPU in every TU that includes a dflash header, for nothing
// dflash uses (docs/bench/compile_time.md). There the clocks alone are
// <bits/chrono.h>; any other standard library gets <chrono> itself. Code that
// uses the calendar or prints a duration includes <chrono>, as it should.
#include <version>

#if defined(__GLIBCXX__) && __has_include(<bits/chrono.h>)
#include <bits/chrono.h>
#else
#include <chrono>
#endif
