// PowerShell syntax check without pwsh: tree-sitter's PowerShell grammar; prints ERROR/MISSING nodes, exits 1 on any.
// Used by installers/check_installers.py (needs: npm install tree-sitter tree-sitter-powershell).
import Parser from 'tree-sitter';
import PS from 'tree-sitter-powershell';
import fs from 'fs';
const parser = new Parser(); parser.setLanguage(PS);
let bad = 0;
for (const f of process.argv.slice(2)) {
  const src = fs.readFileSync(f, 'utf8');
  const tree = parser.parse((i) => src.slice(i, i + 4096));
  const errs = [];
  (function walk(n) { if (n.type === 'ERROR' || n.isMissing) errs.push(n); for (const c of n.children) walk(c); })(tree.rootNode);
  for (const e of errs) console.log(`${f}:${e.startPosition.row + 1}:${e.startPosition.column + 1}: ${e.isMissing ? 'missing ' + e.type : 'syntax error'}: ${src.slice(e.startIndex, Math.min(e.endIndex, e.startIndex + 80)).replace(/\n/g, '\\n')}`);
  console.log(`${f}: ${errs.length ? errs.length + ' problem(s)' : 'parses cleanly'} (${tree.rootNode.descendantCount} nodes)`);
  bad += errs.length;
}
process.exit(bad ? 1 : 0);
