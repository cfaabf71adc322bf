"""agg_revs.py's patch of an agg_profile.rs that predates its TIME line (python3 on PATH; needs
the repository's history: the examples of 3303d62 and 6334648 are read with `git show`)."""

import os
import shutil
import subprocess
import tempfile
import unittest

import agg_revs

EXAMPLE = "dataplane/examples/agg_profile.rs"


def without_docs(text):
    """The file without its `//!` module documentation (which the TIME line's commit edited),
    the datapath's buffer type as 3303d62 wrote it (`Datapath`, before it was generic)."""
    text = text.replace("Datapath<PoolBuf>", "Datapath")
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith("//!"))


def read(path):
    with open(path) as f:
        return f.read()


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


class AddTimeLine(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)
        self.path = os.path.join(self.dir, "agg_profile.rs")
        self.current = read(os.path.join(agg_revs.ROOT, EXAMPLE))

    def old(self, rev):
        return subprocess.run(["git", "show", f"{rev}:{EXAMPLE}"], cwd=agg_revs.ROOT, check=True,
                              stdout=subprocess.PIPE, text=True).stdout

    def test_old_examples_get_the_current_ones_code(self):
        for rev in ("3303d62", "6334648"):
            with self.subTest(rev=rev):
                old = self.old(rev)
                self.assertNotIn("TIME", old)
                write(self.path, old)
                agg_revs.add_time_line(self.path)
                self.assertEqual(without_docs(read(self.path)), without_docs(self.current))

    def test_the_current_example_is_left_as_it_is(self):
        write(self.path, self.current)
        agg_revs.add_time_line(self.path)
        self.assertEqual(read(self.path), self.current)

    def test_an_example_of_another_shape_is_an_error_and_left_as_it_is(self):
        # The loop without its datapath line: the second insertion point is missing.
        old = self.old("6334648").replace("        let mut dp = case.datapath();\n        let mut io", "        let mut io", 1)
        write(self.path, old)
        with self.assertRaises(SystemExit) as e:
            agg_revs.add_time_line(self.path)
        self.assertIn("cannot add the TIME line", str(e.exception))
        self.assertEqual(read(self.path), old)

    def test_a_missing_example_is_an_error(self):
        with self.assertRaises(SystemExit) as e:
            agg_revs.add_time_line(os.path.join(self.dir, "none.rs"))
        self.assertIn("does not exist", str(e.exception))


if __name__ == "__main__":
    unittest.main()
