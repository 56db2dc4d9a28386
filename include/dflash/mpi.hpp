#pragma once
// Umbrella header of the optional MPI support (needs <mpi.h>; CMake: DFLASH_ENABLE_MPI
// and the dflash::mpi target). Nothing else in dflash includes it.
#include "dflash/mpi/job.hpp"
#include "dflash/mpi/job_bottleneck.hpp"
#include "dflash/mpi/job_profile.hpp"
#include "dflash/mpi/mpi_link.hpp"
#include "dflash/mpi/net_link.hpp"
#include "dflash/mpi/wire.hpp"
