"""tools/plot_pktgen.py's choice of throughput points from pktgen summaries: single-size
streams are placed at their size; pcap replays only when their capture holds one frame length.
Runs with Debian's interpreter, /usr/bin/python3 (the points need no matplotlib):
`/usr/bin/python3 -m unittest discover -s tools -p 'test_plot_pktgen.py'`."""

import unittest

import plot_pktgen


def stream(name, sizes, replay=None):
    st = {"name": name, "sizes": sizes, "rx_pps": 2e6, "rx_gbps": 1.5, "tx_pps": 3e6, "tx_gbps": 2.0}
    if replay is not None:
        st["replay"] = replay
    return st


class ThroughputPoints(unittest.TestCase):
    def test_pcap_replays_are_placed_only_with_one_frame_length(self):
        doc = {"streams": [
            stream("fwd-64", [64]),
            stream("mix", [60, 128, 590, 1514], {"distinct_sizes": 4}),
            stream("one", [1400], {"distinct_sizes": 1}),
            stream("old", [1514], {"frames_in_file": 400}),
            stream("many", [], {"distinct_sizes": 300}),
        ]}
        pts = plot_pktgen.throughput_points([("run", doc)])
        self.assertEqual(pts, {"fwd": [(64, 2.0, 1.5)], "one": [(1400, 2.0, 1.5)]})
        self.assertEqual(plot_pktgen.throughput_points([("run", doc)], side="tx")["one"], [(1400, 3.0, 2.0)])


if __name__ == "__main__":
    unittest.main()
