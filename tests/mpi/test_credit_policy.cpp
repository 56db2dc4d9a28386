// credit_policy (pure, no MPI runtime): when a consumer rank returns credits.
// The liveness cases are the point: a producer blocked for credits must get
// them from a consumer that is taking items, also when its window is spread
// over several consumers so that none of them ever owes a whole batch.
#include <catch2/catch.hpp>

#include <dflash/mpi/credit_policy.hpp>

using dflash::mpi::credit_policy;

TEST_CASE("credit batches are half a window, never empty", "[mpi][credits]") {
  CHECK(credit_policy::batch_for(8) == 4);
  CHECK(credit_policy::batch_for(64) == 32);
  CHECK(credit_policy::batch_for(1) == 1);  // a window of one still moves
  CHECK(credit_policy::batch_for(0) == 1);
}

TEST_CASE("a batch goes back at once; nothing is sent when nothing is owed", "[mpi][credits]") {
  for (const bool single : {true, false})
    for (const bool idle : {true, false}) {
      const credit_policy p{4, single};
      CHECK(p.due(4, 3, idle, false));
      CHECK(p.due(9, 0, idle, false));
      CHECK_FALSE(p.due(0, 0, idle, false));
      CHECK_FALSE(p.due(0, 0, idle, true));
    }
}

TEST_CASE("one consumer: a stage taking items holds a part batch; an idle rank returns it", "[mpi][credits]") {
  const credit_policy p{4, /*single_consumer=*/true};
  CHECK_FALSE(p.due(3, 0, /*idle=*/false, false));  // the rest of the window is here or on its way
  CHECK(p.due(3, 0, /*idle=*/true, false));         // nothing taken for a while: settle
  CHECK_FALSE(p.due(3, 2, /*idle=*/true, false));   // items of it still held: they bring a batch due
}

TEST_CASE("several consumers: a part batch goes back as soon as none of the producer's items is held",
          "[mpi][credits]") {
  // Depth 8 over 3 consumers: a blocked producer's window can sit as 3 + 3 + 2,
  // and no consumer would ever owe 4. Holding part batches there stalls the
  // producer until the consumers go idle.
  const credit_policy p{4, /*single_consumer=*/false};
  CHECK(p.due(3, 0, /*idle=*/false, false));
  CHECK(p.due(2, 0, /*idle=*/false, false));
  CHECK_FALSE(p.due(3, 1, /*idle=*/false, false));  // one held: taking it brings it due
}

TEST_CASE("a stop or the end of every producer returns what is owed", "[mpi][credits]") {
  const credit_policy p{8, true};
  CHECK(p.due(1, 5, /*idle=*/false, /*ending=*/true));
}
