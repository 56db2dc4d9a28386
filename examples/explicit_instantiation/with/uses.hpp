#pragma once
#include "../sum_pipeline_extern.hpp"  // the recipe: the engine is compiled once, in sum_pipeline.cpp
