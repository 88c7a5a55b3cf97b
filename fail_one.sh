mkdir -p "$MARK_DIR"''')
open(p,'w').write(s)
