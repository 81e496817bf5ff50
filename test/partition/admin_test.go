package partition

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/session/connector"
	"github.com/meshnode/meshnode/test/proc"
)

// adminClient reads the nodes' admin endpoints. Keep-alives are off so that no idle
// connection (and its goroutines) outlives a request: goleak checks the package.
var adminClient = &http.Client{Timeout: 4 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

func getJSON(addr, path string, v any) error {
	resp, err := adminClient.Get("http://" + addr + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, strings.TrimSpace(string(b)))
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// members is the node's view of the mesh by RID (nil when it does not answer).
func (p *meshProc) members() map[string]string {
	var ms []proc.Member
	if err := getJSON(p.admin(), "/v1/members", &ms); err != nil {
		return nil
	}
	out := map[string]string{}
	for _, m := range ms {
		out[m.RID] = m.State
	}
	return out
}

// sees reports whether the node sees exactly the members of want in their states.
func (p *meshProc) sees(want map[string]string) bool {
	got := p.members()
	for rid, state := range want {
		if got[rid] != state {
			return false
		}
	}
	return got != nil
}

// rooms lists the room Actors the node hosts (ok false when it does not answer).
func (p *meshProc) rooms() (ids []string, ok bool) {
	var as []struct {
		ID   string `json:"id"`
		Kind string `json:"kind"`
	}
	if err := getJSON(p.admin(), "/v1/actors", &as); err != nil {
		return nil, false
	}
	for _, a := range as {
		if a.Kind == "room" {
			ids = append(ids, a.ID)
		}
	}
	return ids, true
}

// quorumMetric is the Prometheus name of the 0/1 gauge meshnode.actor.quorum.
const quorumMetric = "meshnode_actor_quorum"

// quorum is the node's keep-majority gauge: 1 with a majority, 0 without, -1 when the
// node does not answer or does not export it.
func (p *meshProc) quorum() float64 {
	resp, err := adminClient.Get("http://" + p.admin() + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "\n"+quorumMetric) {
		return -1
	}
	return proc.Sum(string(b), quorumMetric)
}

// lookup asks the node's directory where room id lives (GET /v1/actors/{id}); it
// returns the HTTP status and the node RID or the error code of the answer.
func (p *meshProc) lookup(id string) (status int, nodeOrCode string, err error) {
	resp, err := adminClient.Get("http://" + p.admin() + "/v1/actors/" + url.PathEscape(id))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var body struct {
		Node  string `json:"node"`
		Error string `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return resp.StatusCode, "", err
	}
	if resp.StatusCode == http.StatusOK {
		return resp.StatusCode, body.Node, nil
	}
	return resp.StatusCode, body.Error, nil
}

// placement is where each room lives, over the nodes given: room id -> node RIDs
// hosting an activation of it. It fails the test when a node does not answer.
func placement(t *testing.T, nodes []*meshProc) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, p := range nodes {
		ids, ok := p.rooms()
		if !ok {
			t.Fatalf("%s does not answer GET /v1/actors", p.id)
		}
		for _, id := range ids {
			out[id] = append(out[id], p.id)
		}
	}
	return out
}

// bindReply is the sample app's answer to "bind".
type bindReply struct {
	Actor string `json:"actor"`
	Node  string `json:"node"`
}

// echoReply is the room's answer to "room.echo".
type echoReply struct {
	Actor   string          `json:"actor"`
	Node    string          `json:"node"`
	Payload json.RawMessage `json:"payload"`
	Served  int64           `json:"served"`
}

// client is a STREAM client of one node; it is closed when the test ends.
func client(t *testing.T, p *meshProc) *connector.Connector {
	t.Helper()
	c := testkit.DialConnector(t, p.stream(), 10*time.Second)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// callTimeout bounds one request of the test: a request the server never answers
// fails the step instead of hanging it.
const callTimeout = 10 * time.Second

func bind(c *connector.Connector, room string) (bindReply, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	var out bindReply
	err := c.Request(ctx, "bind", map[string]string{"actor": room}, &out)
	return out, err
}

func echo(c *connector.Connector, room string, payload any) (echoReply, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	var out echoReply
	err := c.Request(ctx, "room.echo", payload, &out, connector.WithMetadata("actor", room))
	return out, err
}

// bindAndEcho binds room from a fresh session on p and relays one room.echo to it; the
// session is closed before it returns, so a later bind of the room elsewhere replaces
// nothing. It returns the node of the activation that answered.
func bindAndEcho(t *testing.T, p *meshProc, room string) (echoReply, error) {
	t.Helper()
	c := testkit.DialConnector(t, p.stream(), 10*time.Second)
	defer func() { _ = c.Close() }()
	b, err := bind(c, room)
	if err != nil {
		return echoReply{}, fmt.Errorf("bind %s on %s: %w", room, p.id, err)
	}
	e, err := echo(c, room, map[string]string{"from": p.id})
	if err != nil {
		return echoReply{}, fmt.Errorf("room.echo %s on %s: %w", room, p.id, err)
	}
	if e.Actor != room || e.Node != b.Node || string(e.Payload) != fmt.Sprintf(`{"from":%q}`, p.id) {
		return e, fmt.Errorf("room.echo %s on %s: bound on %s, answered %+v", room, p.id, b.Node, e)
	}
	return e, nil
}

// remoteCode is the error code the server answered, "" when err is not a server's
// Error reply (a drop or a timeout is not one).
func remoteCode(err error) string {
	var re *connector.RemoteError
	if errors.As(err, &re) {
		return re.Code
	}
	return ""
}
