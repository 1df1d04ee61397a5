package runs

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
)

// AuditSpan is the first line of an audit export: where the exported chain starts (the
// anchor) and ends (the head).
type AuditSpan struct {
	Anchor AuditLink `json:"anchor"`
	Head   AuditLink `json:"head"`
}

// auditExportChunk is how many records ExportAudit reads at a time.
const auditExportChunk = 500

// ExportAudit writes every record l keeps as JSON lines, oldest first, after a first line
// holding the AuditSpan, and returns how many records it wrote. VerifyAudit on what
// ReadAuditExport reads back checks the export.
func ExportAudit(ctx context.Context, w io.Writer, l AuditLog) (int, error) {
	anchor, head, err := l.AuditEnds(ctx)
	if err != nil {
		return 0, err
	}
	enc := json.NewEncoder(w)
	if err := enc.Encode(AuditSpan{Anchor: anchor, Head: head}); err != nil {
		return 0, fmt.Errorf("export audit: %w", err)
	}
	n := 0
	for after := anchor.Seq; after < head.Seq; {
		recs, err := l.AuditRecords(ctx, after, auditExportChunk)
		if err != nil {
			return n, err
		}
		if len(recs) == 0 {
			break // records missing up to the head: VerifyAudit says which
		}
		for _, rec := range recs {
			if err := enc.Encode(rec); err != nil {
				return n, fmt.Errorf("export audit: %w", err)
			}
			n++
		}
		after = recs[len(recs)-1].Seq
	}
	return n, nil
}

// ReadAuditExport reads what ExportAudit wrote. Errors name the line that is not a record.
func ReadAuditExport(r io.Reader) (AuditSpan, []AuditRecord, error) {
	var span AuditSpan
	var recs []AuditRecord
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	line := 0
	for sc.Scan() {
		line++
		var err error
		if line == 1 {
			err = json.Unmarshal(sc.Bytes(), &span)
		} else {
			var rec AuditRecord
			err = json.Unmarshal(sc.Bytes(), &rec)
			recs = append(recs, rec)
		}
		if err != nil {
			return span, nil, fmt.Errorf("audit export line %d: %w", line, err)
		}
	}
	if err := sc.Err(); err != nil {
		return span, nil, fmt.Errorf("audit export line %d: %w", line+1, err)
	}
	if line == 0 {
		return span, nil, fmt.Errorf("audit export: empty (its first line is the anchor and head)")
	}
	return span, recs, nil
}
