"""Tests of the dflash_pipeline module on the host twin: zero-copy DLPack export, capsule
lifetimes, exactly-once delivery, stop / cancel from Python, errors as Python exceptions, and
the Python loop in the profile. Run by ctest (python_module) with the module on PYTHONPATH."""
import gc
import json
import threading
import time
import unittest

import numpy as np

import dflash_pipeline as dp

SMALL = dict(hidden=16, seq_len=96, anchors=4, block_size=8, target_workers=2)


def exhaust(it):
    """Iterates to the end, keeping no batch."""
    for _ in it:
        pass


def drain_gc():
    gc.collect()
    gc.collect()


class Export(unittest.TestCase):
    def setUp(self):
        drain_gc()
        self.live0 = dp.live_batches()

    def tearDown(self):
        drain_gc()
        self.assertEqual(dp.live_batches(), self.live0, "a batch outlived every reference to it")

    def first_batch(self, hs):
        for b in hs:
            if not b.dropped:
                return b
        self.fail("no trained batch")

    def test_zero_copy_and_layout(self):
        with dp.HiddenStates(steps=4, **SMALL) as hs:
            b = self.first_batch(hs)
            h = np.from_dlpack(b.hidden)
            self.assertEqual(h.dtype, np.float32)
            self.assertEqual(h.shape, (b.num_tokens, hs.features))
            self.assertEqual(h.__array_interface__["data"][0], b.hidden.data_ptr)  # the batch's memory
            self.assertEqual(b.hidden.data_ptr, b.hidden.data_ptr)  # every export points at the same place
            self.assertEqual(np.from_dlpack(b.tokens).dtype, np.int32)
            self.assertEqual(np.from_dlpack(b.loss_mask).dtype, np.uint8)
            self.assertEqual(np.from_dlpack(b.anchors).shape, (4,))
            self.assertEqual(b.hidden.shape, (b.num_tokens, hs.features))
            self.assertEqual(b.hidden.dtype, "float32")
            self.assertEqual(b.hidden.__dlpack_device__(), (1, 0))  # kDLCPU
            self.assertTrue(np.isfinite(h).all())
            self.assertGreater(float(np.abs(h).sum()), 0.0)

    def test_versioned_and_unversioned_capsules(self):
        with dp.HiddenStates(steps=2, **SMALL) as hs:
            b = self.first_batch(hs)
            t = b.tokens
            self.assertIn("dltensor_versioned", repr(t.__dlpack__(max_version=(1, 0))))
            self.assertIn("dltensor", repr(t.__dlpack__()))
            self.assertNotIn("versioned", repr(t.__dlpack__()))
            with self.assertRaisesRegex(BufferError, "copy=True"):
                t.__dlpack__(copy=True)
            with self.assertRaisesRegex(BufferError, "CPU memory"):
                t.__dlpack__(dl_device=(2, 0))
            with self.assertRaisesRegex(ValueError, "stream=7"):
                t.__dlpack__(stream=7)
            t.__dlpack__(stream=-1)
            t.__dlpack__(copy=False, dl_device=(1, 0))

    def test_capsule_never_consumed_frees_its_batch(self):
        with dp.HiddenStates(steps=2, **SMALL) as hs:
            b = self.first_batch(hs)
            caps = [b.hidden.__dlpack__(max_version=(1, 0)) for _ in range(3)] + [b.hidden.__dlpack__()]
            before = dp.live_batches()
            del b
            exhaust(hs)
            drain_gc()
            self.assertEqual(dp.live_batches(), before)  # the capsules hold it
            del caps  # never consumed: their destructors free it (tearDown checks)

    def test_tensor_outlives_the_pipeline(self):
        with dp.HiddenStates(steps=3, **SMALL) as hs:
            b = self.first_batch(hs)
            expect = np.from_dlpack(b.hidden).copy()
            held = np.from_dlpack(b.hidden)  # consumed: numpy owns the capsule's tensor now
            del b
            exhaust(hs)
        drain_gc()
        self.assertGreaterEqual(dp.live_batches(), self.live0 + 1)  # the array keeps its batch
        np.testing.assert_array_equal(held, expect)  # after the pipeline ended: still the same memory
        del held

    def test_two_consumers_of_one_batch(self):
        with dp.HiddenStates(steps=2, **SMALL) as hs:
            b = self.first_batch(hs)
            x, y = np.from_dlpack(b.hidden), np.from_dlpack(b.hidden)
            self.assertEqual(x.__array_interface__["data"][0], y.__array_interface__["data"][0])
            del b, x
            drain_gc()
            self.assertGreater(float(np.abs(y).sum()), 0.0)  # y still holds the batch
            del y
            exhaust(hs)

    @unittest.skipUnless(__import__("importlib").util.find_spec("torch"), "torch is not installed")
    def test_torch_from_dlpack(self):
        import torch
        with dp.HiddenStates(steps=2, **SMALL) as hs:
            b = self.first_batch(hs)
            t = torch.from_dlpack(b.hidden)
            self.assertEqual(t.data_ptr(), b.hidden.data_ptr)
            self.assertEqual(tuple(t.shape), b.hidden.shape)
            del t, b
            exhaust(hs)


class Delivery(unittest.TestCase):
    def test_every_step_once_in_the_profile(self):
        steps = 25
        with dp.HiddenStates(steps=steps, **SMALL) as hs:
            seen = []
            for b in hs:
                seen.append(b.step)
                time.sleep(0.002)  # the Python step: drafter.work
            self.assertEqual(hs.delivered, steps)
            prof = json.loads(hs.profile("json"))
            table = hs.profile()
        self.assertEqual(sorted(seen), list(range(steps)))
        self.assertEqual(len(set(seen)), steps)
        keys = {k["name"]: k for k in prof["profile"]["keys"]}
        for key in ("drafter.work", "drafter.wait", "target_forward.work", "postprocess.work", "hs_queue.pop_wait"):
            self.assertIn(key, keys)
            self.assertIn(key, table)
        self.assertEqual(keys["drafter.work"]["count"], steps)  # one Python step per batch
        self.assertGreaterEqual(keys["drafter.work"]["min_ns"], 2_000_000)  # each at least the sleep
        self.assertEqual(keys["drafter.wait"]["count"], steps + 1)  # + the wait that found the end
        self.assertTrue(prof["advice"]["bottleneck"]["ok"], prof["advice"])
        # The verdict itself depends on the machine's load (a loaded one leaves no stage saturated):
        # the table carries it either way.
        self.assertIn("bottleneck over", table)
        self.assertTrue("limiting stage" in table or "no stage is saturated" in table, table)
        staging = prof["staging"]  # the pinned staging pool: a few blocks, reused for every step
        self.assertEqual(staging["allocations"] + staging["reuses"], steps)
        self.assertLessEqual(staging["high_water_bytes"], staging["bound_bytes"])
        self.assertIn("hs staging (pinned pool)", table)

    def test_same_batches_as_a_second_run(self):
        def digests():
            with dp.HiddenStates(steps=6, seed=3, **SMALL) as hs:
                return sorted((b.step, b.digest) for b in hs)
        self.assertEqual(digests(), digests())

    def test_pipeline_error_is_a_python_exception_with_its_message(self):
        with dp.HiddenStates(steps=20, fail_at_step=5, **SMALL) as hs:
            got = []
            with self.assertRaisesRegex(RuntimeError, r"drafter: step 5 failed \(fail_at_step"):
                for b in hs:
                    got.append(b.step)
            self.assertNotIn(5, got)
            with self.assertRaisesRegex(RuntimeError, "step 5 failed"):  # it stays the outcome
                next(iter(hs))

    def test_python_exception_mid_iteration_stops_the_pipeline(self):
        t0 = time.monotonic()
        with self.assertRaises(KeyError):
            with dp.HiddenStates(steps=1 << 30, **SMALL) as hs:  # endless for this test's purposes
                for i, _ in enumerate(hs):
                    if i == 3:
                        raise KeyError("the drafter step failed")
        self.assertFalse(hs.running)
        self.assertLess(time.monotonic() - t0, 60)

    def test_stop_cancel_from_python(self):
        with dp.HiddenStates(steps=1 << 30, **SMALL) as hs:
            n = 0
            for _ in hs:
                n += 1
                if n == 5:
                    hs.stop()
            self.assertEqual(n, 5)
            self.assertEqual(hs.delivered, 5)

    def test_stop_drain_delivers_what_is_in_flight(self):
        with dp.HiddenStates(steps=1 << 30, hs_queue_depth=4, **SMALL) as hs:
            seen = []
            for b in hs:
                seen.append(b.step)
                if len(seen) == 3:
                    hs.stop(drain=True)
            self.assertGreaterEqual(len(seen), 3)
            self.assertEqual(sorted(seen), list(range(len(seen))))  # in flight: no step lost on the way
            self.assertEqual(hs.delivered, len(seen))

    def test_stop_from_another_thread_wakes_the_loop(self):
        with dp.HiddenStates(steps=1 << 30, **SMALL) as hs:
            next(iter(hs))
            threading.Timer(0.2, hs.stop).start()
            for _ in hs:
                time.sleep(0.01)
        self.assertFalse(hs.running)

    def test_close_without_iterating(self):
        hs = dp.HiddenStates(steps=50, **SMALL)
        hs.close()
        hs.close()  # twice is fine
        self.assertFalse(hs.running)
        self.assertIn("target_forward", hs.profile())  # the profile is still there

    def test_bad_arguments_name_themselves(self):
        with self.assertRaisesRegex(ValueError, r"seq_len=10 is out of range \[48"):
            dp.HiddenStates(seq_len=10)
        with self.assertRaisesRegex(ValueError, "device='tpu'"):
            dp.HiddenStates(device="tpu")
        with self.assertRaisesRegex(ValueError, "what_if"):
            dp.HiddenStates(what_if=["no_such_stage.speed=2"])
        with dp.HiddenStates(steps=1, **SMALL) as hs:
            with self.assertRaisesRegex(ValueError, "format='xml'"):
                hs.profile("xml")
        if not dp.has_cuda:
            with self.assertRaisesRegex(RuntimeError, "device='cuda'"):
                dp.HiddenStates(device="cuda")


if __name__ == "__main__":
    unittest.main()
