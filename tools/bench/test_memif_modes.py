"""memif.py's reading of its runs (python3 on PATH; no DPDK, nothing run): a run's mode from the
cross-core probes before and after it, the footer that counts the runs per mode, and who held a
run's rate."""

import unittest

import memif


class ModeTest(unittest.TestCase):
    def test_a_run_is_in_a_mode_only_if_both_probes_agree(self):
        slow = memif.PROBE_SLOW
        self.assertEqual(memif.mode_of([80, slow - 1]), "fast")
        self.assertEqual(memif.mode_of([slow, 300]), "slow")
        self.assertEqual(memif.mode_of([80, 300]), "mixed")
        self.assertEqual(memif.mode_of([300, 80]), "mixed")
        self.assertIsNone(memif.mode_of([None, 80]))
        self.assertIsNone(memif.mode_of([80, None]))

    def test_the_footer_counts_runs_per_mode(self):
        run = lambda before, after: {"xfer": [before, after], "mode": memif.mode_of([before, after])}
        res = {
            "open-4w-256-udp": {
                "dpu": {"det": [run(80, 82), run(270, 300), run(81, 290)]},
                "testpmd-io": {"det": [run(79, 83), {"xfer": [None, 80], "mode": None}]},
            }
        }
        line = memif.probe_line(res)
        self.assertIn("median 82 [79-300]", line)
        self.assertIn("fast mode (both probes under 150) 2, in the slow mode 1, changing modes 1, of 4", line)
        self.assertIsNone(memif.probe_line({"fwd64": {"dpu": {"det": [{"xfer": [None, None], "mode": None}]}}}))


class HeldTest(unittest.TestCase):
    def test_a_run_is_the_devices_when_the_ring_refused_or_the_device_was_nearly_saturated(self):
        self.assertTrue(memif.held_by_device({"refusals_per_burst": 1.0}))
        self.assertFalse(memif.held_by_device({"refusals_per_burst": 0.7}))
        # The goal row of 2026-12-07 04:24: the appliance 94% busy, pktgen refused 0.7 per burst.
        self.assertTrue(memif.held_by_device({"refusals_per_burst": 0.7, "busy": 0.94}))
        self.assertFalse(memif.held_by_device({"refusals_per_burst": 0.7, "busy": 0.5}))
        self.assertFalse(memif.held_by_device({"refusals_per_burst": 0.2, "busy": None}))


if __name__ == "__main__":
    unittest.main()
