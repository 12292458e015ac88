package ui

import (
	"math/rand"
	"strings"
	"testing"
)

func joinSegs(segs []seg) string {
	var b strings.Builder
	for _, s := range segs {
		if s.Esc {
			b.WriteString("⟦" + s.Text + "⟧")
			continue
		}
		if s.Class != "" {
			b.WriteString("<" + s.Class + ">")
		}
		b.WriteString(s.Text)
	}
	return b.String()
}

// SGR becomes classes; every other sequence and control is shown as its
// escape; nothing is executed.
func TestANSI(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"plain\n", "plain\n"},
		{"\x1b[31mred\x1b[0m back", "<f1>red back"},
		{"\x1b[1;32mbold green\x1b[22m green", "<f2 sb>bold green<f2> green"},
		{"\x1b[38;5;196mx\x1b[39my", "<f9>xy"},
		{"\x1b[48;2;0;0;238mblue bg", "<b4>blue bg"},
		{"\x1b[90mgrey\x1b[m", "<f8>grey"},
		{"\x1b[2J\x1b[Hcleared?", "⟦\\x1b[2J⟧⟦\\x1b[H⟧cleared?"},
		{"up\x1b[1A\x1b[2Kover", "up⟦\\x1b[1A⟧⟦\\x1b[2K⟧over"},
		{"\x1b]52;c;aGVsbG8=\x07clip", "⟦\\x1b]52;c;aGVsbG8=\\x07⟧clip"},
		{"\x1b]8;;javascript:alert(1)\x1b\\link\x1b]8;;\x1b\\", "⟦\\x1b]8;;javascript:alert(1)\\x1b\\⟧link⟦\\x1b]8;;\\x1b\\⟧"},
		{"\x1bPq#0;2;0;0;0\x1b\\", "⟦\\x1bPq#0;2;0;0;0\\x1b\\⟧"},
		{"\x1bc reset", "⟦\\x1bc⟧ reset"},
		{"bell\a back\bspace", "bell⟦\\x07⟧ back⟦\\x08⟧space"},
		{"over\rwrite\r\nline", "over⟦\\r⟧write\r\nline"},
		{"rtl \u202eevil\u202c", "rtl ⟦\\u202e⟧evil⟦\\u202c⟧"},
		{"bad \xff byte", "bad ⟦\\xff⟧ byte"},
		{"c1 \u009b31m", "c1 ⟦\\u009b⟧31m"},
		{"lone \x1b", "lone ⟦\\x1b⟧"},
		{"\x1b[31;<mnot sgr", "⟦\\x1b[31;<m⟧not sgr"},
	} {
		got := joinSegs(newANSI().feed([]byte(c.in), true))
		if got != c.want {
			t.Errorf("%q:\n got %q\nwant %q", c.in, got, c.want)
		}
	}
}

// Fed in pieces of any size, the output is what the whole gives: a
// sequence or a character split across feeds is held back, and pending
// counts what is held.
func TestANSIPieces(t *testing.T) {
	in := "a\x1b[1;31mbé\u202ec\x1b]0;title\x07d\r\ne\x1b[2Kf\xe2\x80\xaeg\x1b[0m\r"
	whole := joinSegs(newANSI().feed([]byte(in), true))
	rnd := rand.New(rand.NewSource(1))
	for round := 0; round < 200; round++ {
		a := newANSI()
		var segs []seg
		fed := 0
		for fed < len(in) {
			n := 1 + rnd.Intn(6)
			if fed+n > len(in) {
				n = len(in) - fed
			}
			segs = append(segs, a.feed([]byte(in[fed:fed+n]), false)...)
			fed += n
			if a.pending() > maxOSC+1 {
				t.Fatalf("holds %d bytes back", a.pending())
			}
		}
		segs = append(segs, a.feed(nil, true)...)
		// Adjacent segments of one style may be split differently.
		if got := joinSegs(merge(segs)); got != joinSegs(merge(newANSI().feed([]byte(in), true))) {
			t.Fatalf("in pieces:\n got %q\nwant %q", got, whole)
		}
	}
}

func merge(segs []seg) []seg {
	var out []seg
	for _, s := range segs {
		if n := len(out); n > 0 && !s.Esc && !out[n-1].Esc && out[n-1].Class == s.Class {
			out[n-1].Text += s.Text
			continue
		}
		out = append(out, s)
	}
	return out
}

// What the converter emits as HTML has no markup of its input: only its
// own spans, with classes from its fixed set.
func FuzzANSIHTML(f *testing.F) {
	f.Add([]byte("\x1b[31m<script>alert(1)</script>\x1b]8;;javascript:x\x07"))
	f.Add([]byte("\u202e\"'&<>\x00\x1b[38;2;1;2;3m"))
	f.Fuzz(func(t *testing.T, in []byte) {
		var b strings.Builder
		segsHTML(&b, newANSI().feed(in, true))
		out := b.String()
		rest := out
		for {
			i := strings.IndexByte(rest, '<')
			if i < 0 {
				break
			}
			rest = rest[i:]
			switch {
			case strings.HasPrefix(rest, `<span class="`):
				j := strings.Index(rest[13:], `">`)
				if j < 0 {
					t.Fatalf("unterminated span in %q", out)
				}
				for _, c := range rest[13 : 13+j] {
					if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == ' ') {
						t.Fatalf("class %q in %q", rest[13:13+j], out)
					}
				}
				rest = rest[13+j+2:]
			case strings.HasPrefix(rest, `</span>`):
				rest = rest[7:]
			default:
				t.Fatalf("markup %q in %q", rest[:min(len(rest), 20)], out)
			}
		}
		if strings.ContainsAny(out, "\x1b\u202e\u2066\x07") {
			t.Fatalf("a control or an override survived: %q", out)
		}
	})
}
