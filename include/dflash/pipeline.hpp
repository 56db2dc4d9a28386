#pragma once
// Pipelines: the Stage concept, Pipeline, and the periodic reporter.
#include "dflash/profile/periodic_reporter.hpp"
#include "dflash/pipeline/function_stage.hpp"
#include "dflash/pipeline/make_pipeline.hpp"
#include "dflash/pipeline/pipeline.hpp"
#include "dflash/pipeline/stage.hpp"
#include "dflash/deprecated.hpp"  // the old spellings, until their removal (DFLASH_NO_DEPRECATED hides them)
