// Type-checked by tsc in .ci/contract against the types openapi-typescript
// generates from openapi/v2.yaml into ./generated/v2.d.ts. Never run: it
// fails to compile when the document stops describing what integrators rely
// on. Every `@ts-expect-error` line must be an error, so the contract's
// constraints (required fields, enums, error codes per status) are checked
// too, not only that the types exist.

import type { components, paths } from "./generated/v2";

type Json = "application/json; charset=utf-8";
type Balance = paths["/v2/master-account/balance"]["get"];
type Complete = paths["/v2/payment/order/complete"]["post"];

type BalanceQuery = Balance["parameters"]["query"];
type BalanceOk = Balance["responses"][200]["content"][Json];
type BalanceBadRequest = Balance["responses"][400]["content"][Json];
type BalanceForbidden = Balance["responses"][403]["content"][Json];
type BalanceNotFound = Balance["responses"][404]["content"][Json];
type BalanceInternal = Balance["responses"][500]["content"][Json];
type BalanceUnavailable = Balance["responses"][503]["content"][Json];

type CompleteBody = Complete["requestBody"]["content"]["application/json"];
type CompleteOk = Complete["responses"][200]["content"][Json];
type CompleteBadRequest = Complete["responses"][400]["content"][Json];
type CompleteForbidden = Complete["responses"][403]["content"][Json];
type CompleteNotFound = Complete["responses"][404]["content"][Json];
type CompleteConflict = Complete["responses"][409]["content"][Json];
type CompleteTooLarge = Complete["responses"][413]["content"][Json];
type CompleteFailed = Complete["responses"][500]["content"][Json];
type CompleteUnavailable = Complete["responses"][503]["content"][Json];

// ------------------------------------------------------------------ balance

export const byId: BalanceQuery = { server_id: 0, user_id: 1 };
export const byEmail: BalanceQuery = {
  server_id: 3,
  email: "player@example.com",
  balance_type: "bonus",
};
// @ts-expect-error server_id is required
export const noServer: BalanceQuery = { user_id: 1 };
// @ts-expect-error balance_type is main or bonus
export const badType: BalanceQuery = { server_id: 0, user_id: 1, balance_type: "both" };

export const both: BalanceOk = { success: true, main_balance: "1250.50", bonus_balance: "25.00" };
export const mainOnly: BalanceOk = { success: true, main_balance: "1250.50" };
// @ts-expect-error balances are decimal strings, never numbers
export const floaty: BalanceOk = { success: true, main_balance: 1250.5 };

export const invalid: BalanceBadRequest = {
  success: false,
  code: "VALIDATION_ERROR",
  message: { user_id: "user_id is required when email is empty" },
};
export const refused: BalanceForbidden = { success: false, code: "TOKEN_DISABLED" };
export const noUser: BalanceNotFound = { success: false, code: "USER_NOT_FOUND" };
export const noServerFound: BalanceNotFound = { success: false, code: "SERVER_NOT_FOUND" };
// @ts-expect-error ORDER_NOT_FOUND is not a code of the balance endpoint's 404
export const wrong404: BalanceNotFound = { success: false, code: "ORDER_NOT_FOUND" };
export const internal: BalanceInternal = { success: false, code: "INTERNAL_ERROR" };
export const busy: BalanceUnavailable = { success: false, code: "SERVICE_UNAVAILABLE" };

// ------------------------------------------------------------------ complete

export const webhook: CompleteBody = {
  payment_system: "cstm:paygate",
  order_id: "Order:AbC123xYz",
  payment_id: "pay_8f2c1a",
};
export const withoutPaymentId: CompleteBody = {
  payment_system: "cstm:paygate",
  order_id: "Order:AbC123xYz",
  payment_id: null,
};
// @ts-expect-error order_id is required
export const noOrder: CompleteBody = { payment_system: "cstm:paygate" };

export const completed: CompleteOk = {
  success: true,
  order_id: "Order:AbC123xYz",
  payment_system: "cstm:paygate",
  payment_id: null,
  status: "completed",
  amount: "10.25",
  completed_at: "2026-11-22T10:15:30.123456+00:00",
};
// @ts-expect-error status is always "completed"
export const pending: CompleteOk = { ...completed, status: "pending" };

export const badBody: CompleteBadRequest = {
  success: false,
  code: "VALIDATION_ERROR",
  message: { order_id: "order_id is required" },
};
export const denied: CompleteForbidden = { success: false, code: "ACCESS_DENIED" };
export const noOrderFound: CompleteNotFound = { success: false, code: "ORDER_NOT_FOUND" };
export const duplicate: CompleteConflict = { success: false, code: "ORDER_ALREADY_COMPLETED" };
// @ts-expect-error 409 carries only ORDER_ALREADY_COMPLETED
export const wrong409: CompleteConflict = { success: false, code: "ORDER_NOT_FOUND" };
export const tooLarge: CompleteTooLarge = { success: false, code: "PAYLOAD_TOO_LARGE" };
export const updateFailed: CompleteFailed = { success: false, code: "ORDER_UPDATE_FAILED" };
export const unavailable: CompleteUnavailable = {
  success: false,
  code: "PAYMENT_PROCESSING_ERROR",
};

// ------------------------------------------------------------------ a typed call

type ErrorCode =
  | components["schemas"]["AuthErrorCode"]
  | components["schemas"]["OrderNotFoundCode"]
  | components["schemas"]["AlreadyCompletedCode"]
  | components["schemas"]["ValidationErrorCode"]
  | components["schemas"]["PayloadTooLargeCode"]
  | components["schemas"]["CompleteFailedCode"]
  | components["schemas"]["CompleteUnavailableCode"];

/** What a webhook handler does with the answer: done, or retry later. */
export async function completeOrder(
  baseUrl: string,
  token: string,
  body: CompleteBody,
): Promise<{ done: true; order: CompleteOk } | { done: false; code: ErrorCode; retry: boolean }> {
  const response = await fetch(`${baseUrl}/v2/payment/order/complete`, {
    method: "POST",
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  if (response.status === 200) {
    return { done: true, order: (await response.json()) as CompleteOk };
  }
  const error = (await response.json()) as
    | CompleteBadRequest
    | CompleteForbidden
    | CompleteNotFound
    | CompleteConflict
    | CompleteTooLarge
    | CompleteFailed
    | CompleteUnavailable;
  if (error.code === "ORDER_ALREADY_COMPLETED") {
    // A duplicate webhook: already done.
    return { done: false, code: error.code, retry: false };
  }
  return { done: false, code: error.code, retry: response.status >= 500 };
}
