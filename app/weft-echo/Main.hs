-- | An echo server with the I/O manager chosen on the command line.
module Main (main) where

import Example.Serve
import Example.Servers

main :: IO ()
main = serverMain "PORT [--manager weft|ghc] [--idle-timeout SECONDS] [--max-clients N] [--evict none|stalled|stalled-then-idle]" 0 0 plainAdmit (\_ -> Just echoServer)
