-- | weft-bench's one option parser. Each command describes its options
-- as a table of 'flag's and 'value's; unknown options and missing or
-- unreadable values are errors that name the command and list what it
-- takes.
module Bench.Options
  ( Option
  , flag
  , value
  , parseOptionsWith
  , parseOrExit
    -- * Readers
  , number
  , positive
  , listOf
  ) where

import Data.List (intercalate)
import System.Exit (ExitCode (..), exitWith)
import System.IO (hPutStrLn, stderr)

import Bench.Report (splitOn)

-- | An option of a command whose options are of type @o@.
data Option o = Option
  { optName  :: String
  , optValue :: Maybe String
    -- ^ What its value is, for the usage line; 'Nothing' for a flag.
  , optApply :: Maybe String -> Maybe (o -> o)
    -- ^ Given its value (if it takes one), how it changes the options;
    -- 'Nothing' if the value is unreadable.
  }

-- | An option without a value.
flag :: String -> (o -> o) -> Option o
flag name f = Option name Nothing (const (Just f))

-- | An option with one value (described by @what@ in the usage line),
-- read by @reader@, which may refuse it.
value :: String -> String -> (String -> Maybe a) -> (a -> o -> o) -> Option o
value name what reader f = Option name (Just what) (\v -> v >>= fmap f . reader)

-- | Parse a command's arguments with its table, from the defaults.
parseOptionsWith :: String -> [Option o] -> o -> [String] -> Either String o
parseOptionsWith command table = go
  where
    go o [] = Right o
    go o (x : rest) = case [ opt | opt <- table, optName opt == x ] of
      [] -> Left ("weft-bench " ++ command ++ ": unknown option " ++ x ++ " (use " ++ usage ++ ")")
      (opt : _) -> case optValue opt of
        Nothing -> maybe (bad x "") (\f -> go (f o) rest) (optApply opt Nothing)
        Just what -> case rest of
          (v : rest') -> maybe (bad x (" " ++ v)) (\f -> go (f o) rest') (optApply opt (Just v))
          [] -> Left ("weft-bench " ++ command ++ ": " ++ x ++ " needs a value (" ++ what ++ ")")
    bad x v = Left ("weft-bench " ++ command ++ ": cannot use " ++ x ++ v ++ " (use " ++ usage ++ ")")
    usage = intercalate ", " [ optName opt ++ maybe "" (' ' :) (optValue opt) | opt <- table ]

-- | 'parseOptionsWith', or, on bad arguments, the message on stderr and
-- exit (status 2), before anything runs.
parseOrExit :: String -> [Option o] -> o -> [String] -> IO o
parseOrExit command table defaults args = case parseOptionsWith command table defaults args of
  Right o -> return o
  Left msg -> hPutStrLn stderr msg >> exitWith (ExitFailure 2)

-- | A number as 'read' reads it.
number :: Read a => String -> Maybe a
number s = case reads s of
  [(x, "")] -> Just x
  _ -> Nothing

-- | A number above zero.
positive :: (Read a, Num a, Ord a) => String -> Maybe a
positive s = case number s of
  Just x | x > 0 -> Just x
  _ -> Nothing

-- | A comma-separated list, each item read by the reader.
listOf :: (String -> Maybe a) -> String -> Maybe [a]
listOf reader = mapM reader . splitOn ','
