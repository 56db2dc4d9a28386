// dflash::mpi from a consumer: <dflash/mpi.hpp> compiles and the program links
// against MPI through the target alone. Runs without mpirun (no MPI_Init).
#include <dflash/mpi.hpp>

#include <cstdio>

int main() {
  int initialized = 1;
  MPI_Initialized(&initialized);
  std::printf("mpi consumer: initialized=%d\n", initialized);
  return initialized == 0 ? 0 : 1;
}
