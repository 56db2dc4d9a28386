#pragma once
// std::function alone. libstdc++'s <functional> in C++17 and later also
// carries the searchers, with <unordered_map>, <array> and the algorithms
// behind them: about 0.08 s of CPU in every TU that includes the periodic
// reporter, for a type-erased sink (docs/bench/compile_time.md). There
// std::function alone is <bits/std_function.h>; any other standard library
// gets <functional>.
#include <version>

#if defined(__GLIBCXX__) && __has_include(<bits/std_function.h>)
#include <bits/std_function.h>
#else
#include <functional>
#endif
