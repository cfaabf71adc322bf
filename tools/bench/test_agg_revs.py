"""agg_revs.py's patch of an agg_profile.rs that predates its TIME line (python3 on PATH)."""

import os
import shutil
import tempfile
import unittest

import agg_revs

EXAMPLE = os.path.join(agg_revs.ROOT, "dataplane/examples/agg_profile.rs")
# The three statements agg_revs.py adds, as the example has them since it prints TIME.
ADDED = [
    "    let mut t = std::time::Duration::ZERO;\n",
    "        let st = std::time::Instant::now();\n",
    "        t += st.elapsed();\n",
    '    println!("TIME {:.2} ns/contribution", t.as_nanos() as f64 / contributions as f64);\n',
]


class AddTimeLine(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)
        self.path = os.path.join(self.dir, "agg_profile.rs")

    def test_an_old_example_gets_exactly_the_statements_of_the_current_one(self):
        current = open(EXAMPLE).read()
        for line in ADDED:
            self.assertIn(line, current)
        # The example as it was before the TIME line (doc comment aside, which never mattered).
        old = "".join(l for l in current.splitlines(keepends=True) if l not in ADDED)
        self.assertNotIn("TIME ", old.replace("`TIME`", ""))
        open(self.path, "w").write(old.replace("`TIME`", "`T`"))
        agg_revs.add_time_line(self.path)
        self.assertEqual(open(self.path).read(), current.replace("`TIME`", "`T`"))

    def test_the_current_example_is_left_as_it_is(self):
        shutil.copy(EXAMPLE, self.path)
        agg_revs.add_time_line(self.path)
        self.assertEqual(open(self.path).read(), open(EXAMPLE).read())

    def test_an_example_it_cannot_patch_is_an_error(self):
        open(self.path, "w").write("fn main() {}\n")
        with self.assertRaises(SystemExit) as e:
            agg_revs.add_time_line(self.path)
        self.assertIn("cannot add the TIME line", str(e.exception))


if __name__ == "__main__":
    unittest.main()
