package etcdtest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// proxy forwards TCP connections from its own port to a member's client
// port. Paused, it behaves like a member whose process was stopped
// (SIGSTOP): connections are still accepted (the kernel's backlog does
// that for a stopped process) and stay open, but no byte goes either way
// until it is resumed.
type proxy struct {
	l      net.Listener
	target string

	mu     sync.Mutex
	paused bool
	resume chan struct{} // closed by Resume; replaced by Pause
	conns  map[net.Conn]bool
	wg     sync.WaitGroup
}

func newProxy(t testing.TB, target string) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l, target: target, resume: make(chan struct{}), conns: map[net.Conn]bool{}}
	close(p.resume)
	p.wg.Add(1)
	go p.accept()
	return p
}

func (p *proxy) addr() string { return p.l.Addr().String() }

// gate blocks while the proxy is paused.
func (p *proxy) gate() {
	p.mu.Lock()
	ch := p.resume
	p.mu.Unlock()
	<-ch
}

func (p *proxy) pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.paused {
		p.paused = true
		p.resume = make(chan struct{})
	}
}

func (p *proxy) unpause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused {
		p.paused = false
		close(p.resume)
	}
}

func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		c.Close()
		return false
	}
	p.conns[c] = true
	return true
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.gate() // a stopped member reads nothing, not even a handshake
			u, err := net.Dial("tcp", p.target)
			if err != nil || !p.track(u) {
				c.Close()
				return
			}
			done := make(chan struct{}, 2)
			go func() { p.copy(u, c); done <- struct{}{} }()
			go func() { p.copy(c, u); done <- struct{}{} }()
			<-done
			c.Close()
			u.Close()
			<-done
			p.mu.Lock()
			if p.conns != nil {
				delete(p.conns, c)
				delete(p.conns, u)
			}
			p.mu.Unlock()
		}()
	}
}

// copy forwards src to dst, holding each chunk while the proxy is paused.
func (p *proxy) copy(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.gate()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				return
			}
			if tc, ok := dst.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
			return
		}
	}
}

// close stops the proxy and closes every connection through it.
func (p *proxy) close() {
	p.l.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = nil
	if p.paused {
		p.paused = false
		close(p.resume)
	}
	p.mu.Unlock()
	p.wg.Wait()
}
