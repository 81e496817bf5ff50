package main

import (
	"net/http"
	"slices"
	"strconv"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/topic"
)

// topicsJSON is GET /v1/topics: every topic with a subscriber anywhere in the fleet, as
// this node knows it (presence is eventually consistent: docs/topics.md), by name, a
// page at a time.
type topicsJSON struct {
	Total  int              `json:"total"`
	Topics []topic.Presence `json:"topics"`
	Next   string           `json:"next,omitempty"` // the name to pass as after for the next page
	Stats  topic.Stats      `json:"stats"`          // this node's topic figures
}

// maxTopicsPage bounds a page of GET /v1/topics.
const maxTopicsPage = 1000

// adminTopics serves GET /v1/topics and GET /v1/topics/{name}.
func adminTopics(mux *http.ServeMux, node *meshnode.Node) {
	mux.HandleFunc("GET /v1/topics", func(w http.ResponseWriter, r *http.Request) {
		after := r.URL.Query().Get("after")
		limit := defaultPage
		if v := r.URL.Query().Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > maxTopicsPage {
				writeError(w, fault.Errorf(fault.InvalidOperation, "limit=%q: want 1..%d", v, maxTopicsPage))
				return
			}
			limit = n
		}
		all := node.Topics().List()
		if !withSystem(r) {
			all = slices.DeleteFunc(all, func(p topic.Presence) bool { return topic.Reserved(p.Topic) })
		}
		out := topicsJSON{Total: len(all), Topics: []topic.Presence{}, Stats: node.Topics().Stats()}
		for _, p := range all {
			if after != "" && p.Topic <= after {
				continue
			}
			if len(out.Topics) == limit {
				out.Next = out.Topics[limit-1].Topic
				break
			}
			out.Topics = append(out.Topics, p)
		}
		writeJSON(w, out)
	})
	mux.HandleFunc("GET /v1/topics/{name}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		if err := topic.CheckName(name); err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, node.Topics().Presence(name))
	})
}
