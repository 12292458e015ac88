package egress

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/time/rate"
)

// The sandbox's resolver answers A and AAAA questions for names its
// policy allows, with the addresses the proxy itself would connect to
// (the real ones, or XMODE_SANDBOX_RESOLVE's); any other name is NXDOMAIN
// and any other question gets no answer. It forwards nothing: a question
// never leaves the proxy, so DNS carries no data out (what the proxy's own
// lookup of an allowed name sends is the name, to that name's servers).
// Questions are rate-limited per sandbox.

// dnsTTL is the TTL of every answer: short, so a policy change is seen soon.
const dnsTTL = 30

// maxAnswers bounds an answer (a UDP reply stays small).
const maxAnswers = 8

type dnsServer struct {
	sb       *sandbox
	udp, tcp *dns.Server
	pc       net.PacketConn
	ln       net.Listener
	limit    *rate.Limiter
	limited  atomic.Int64 // questions refused for the rate since the last record of them
}

func (sb *sandbox) newDNS(addr string) (*dnsServer, error) {
	pc, ln, err := listenUDPAndTCP(addr)
	if err != nil {
		return nil, err
	}
	cfg := sb.srv.opts.Config
	d := &dnsServer{sb: sb, pc: pc, ln: ln, limit: rate.NewLimiter(rate.Limit(cfg.DNSRate), cfg.DNSBurst)}
	h := dns.HandlerFunc(d.serve)
	d.udp = &dns.Server{PacketConn: pc, Handler: h, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second}
	d.tcp = &dns.Server{Listener: ln, Handler: h, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
		MaxTCPQueries: 16, IdleTimeout: func() time.Duration { return 5 * time.Second }}
	go d.udp.ActivateAndServe()
	go d.tcp.ActivateAndServe()
	return d, nil
}

// listenUDPAndTCP listens on addr over UDP and TCP, on one port: when the
// port is to be chosen (0), the TCP listener takes the UDP one's, and
// another is tried while that is taken.
func listenUDPAndTCP(addr string) (net.PacketConn, net.Listener, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, nil, err
	}
	for try := 0; ; try++ {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, nil, err
		}
		ln, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, ln, nil
		}
		pc.Close()
		if ap.Port() != 0 || try == 20 {
			return nil, nil, err
		}
	}
}

func (d *dnsServer) addr() string { return d.pc.LocalAddr().String() }

func (d *dnsServer) close() {
	_ = d.udp.Shutdown()
	_ = d.tcp.Shutdown()
	d.pc.Close()
	d.ln.Close()
	d.flushLimited("")
}

// flushLimited records how many questions the rate refused since the last
// such record.
func (d *dnsServer) flushLimited(client string) {
	if n := d.limited.Swap(0); n > 0 {
		d.sb.write(Record{Time: d.sb.srv.opts.Now().UTC(), Kind: "dns", Client: client, Verdict: Denied, Rule: "rate",
			Reason: "questions over the sandbox's DNS rate were refused", Count: n})
	}
}

func (d *dnsServer) serve(w dns.ResponseWriter, q *dns.Msg) {
	m := new(dns.Msg)
	if q.Opcode != dns.OpcodeQuery || len(q.Question) != 1 {
		m.SetRcode(q, dns.RcodeRefused)
		_ = w.WriteMsg(m)
		return
	}
	if !d.limit.Allow() {
		d.limited.Add(1)
		m.SetRcode(q, dns.RcodeRefused)
		_ = w.WriteMsg(m)
		return
	}
	sb := d.sb
	st := sb.state.Load()
	qn := q.Question[0]
	name := strings.ToLower(strings.TrimSuffix(qn.Name, "."))
	qtype := dns.TypeToString[qn.Qtype]
	if qtype == "" {
		qtype = "TYPE" + strconv.Itoa(int(qn.Qtype))
	}
	rec := Record{Time: sb.srv.opts.Now().UTC(), Kind: "dns", Client: w.RemoteAddr().String(), Host: name, QType: qtype}
	d.flushLimited(rec.Client)
	answer := func(rcode int, verdict string, d Decision, reason string) {
		m.SetRcode(q, rcode)
		m.RecursionAvailable = true
		rec.Verdict, rec.Rule, rec.Source, rec.Reason = verdict, d.Rule, d.Source, reason
		sb.write(rec)
		_ = w.WriteMsg(m)
	}
	if qn.Qclass != dns.ClassINET {
		answer(dns.RcodeRefused, Denied, deny("no rule", "", ""), "only class IN is answered")
		return
	}
	dec, ok := st.p.AllowsName(name)
	if !ok {
		answer(dns.RcodeNameError, Denied, dec, dec.Reason)
		return
	}
	if qn.Qtype != dns.TypeA && qn.Qtype != dns.TypeAAAA {
		// NODATA: the name exists, nothing of this type is given out.
		answer(dns.RcodeSuccess, Denied, dec, "only A and AAAA questions are answered")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	addrs, rd, err := st.resolveName(ctx, name)
	cancel()
	switch {
	case err != nil:
		answer(dns.RcodeServerFailure, Failed, dec, err.Error())
		return
	case !rd.Allowed:
		answer(dns.RcodeNameError, Denied, rd, rd.Reason)
		return
	}
	for _, a := range addrs {
		if len(m.Answer) == maxAnswers {
			break
		}
		hdr := dns.RR_Header{Name: qn.Name, Class: dns.ClassINET, Ttl: dnsTTL}
		switch {
		case qn.Qtype == dns.TypeA && a.Is4():
			hdr.Rrtype = dns.TypeA
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: net.IP(a.AsSlice())})
		case qn.Qtype == dns.TypeAAAA && a.Is6():
			hdr.Rrtype = dns.TypeAAAA
			m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: net.IP(a.AsSlice())})
		default:
			continue
		}
		rec.Answers = append(rec.Answers, a.String())
	}
	answer(dns.RcodeSuccess, Allowed, dec, "")
}

// resolveName is a name's addresses as the proxy would use them, or the
// decision refusing them.
func (st *state) resolveName(ctx context.Context, name string) ([]netip.Addr, Decision, error) {
	addrs, err := st.lookup(ctx, name)
	if err != nil {
		return nil, Decision{}, err
	}
	if d := st.checkResolved(name, addrs, 0); !d.Allowed {
		return nil, d, nil
	}
	return addrs, Decision{Allowed: true}, nil
}
