#pragma once
#include "../sum_pipeline.hpp"  // no recipe: every TU compiles the engine it uses
