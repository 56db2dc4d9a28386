#pragma once
// The ops area, host side: document ids, hidden-state packing, batched
// read-back, drafter block masks, anchor selection (and the bf16 storage
// type). GPU paths are in dflash/ops/*.cuh, included from .cu TUs.
#include "dflash/ops/anchors.hpp"
#include "dflash/ops/batched_readback.hpp"
#include "dflash/ops/bf16.hpp"
#include "dflash/ops/block_mask.hpp"
#include "dflash/ops/doc_layout.hpp"
#include "dflash/ops/doc_ids.hpp"
#include "dflash/ops/keys.hpp"
#include "dflash/ops/pack_hidden_states.hpp"
