package console

// FreshConns is how many connections have not sent a request yet.
func (s *Server) FreshConns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.fresh)
}
