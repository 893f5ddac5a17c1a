-- | An HTTP/1.1 keep-alive server answering every request with the 42-byte
-- pong ("Example.Http"): request line and headers parsed, pipelining
-- honoured, malformed requests answered with 400 and closed, header limits
-- enforced (431). With weft, idle connections are closed after 60 s unless
-- @--idle-timeout@ says otherwise.
module Main (main) where

import Example.Serve
import Example.Servers

main :: IO ()
main = serverMain "PORT [--manager weft|ghc] [--idle-timeout SECONDS]" 0 60000000 (\_ -> Just pongServer)
